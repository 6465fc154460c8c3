"""The README's first command, run as a newcomer runs it: ``tiered-proxy demo`` with no flags.

While it serves, two client libraries read the whole history from offset 0 through the address
it printed, and the broker itself (asked directly, not through the proxy) must have moved its log
start past the remote log start on every partition: the records below it can only have come from
the remote tier. The status page it printed the address of shows the same offsets as its proof.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from tests.clients import consume_records
from tiering.broker_client import EARLIEST, LATEST, BrokerClient

DEMO_PORT = 19092  # the README's command takes the default listener


def _read_until(process: subprocess.Popen, pattern: str, timeout: float, seen: list[str]) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break  # the demo exited
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            return found
    raise AssertionError(f"demo never printed {pattern!r}; it printed:\n{''.join(seen)}")


def _log_starts_at_the_broker(bootstrap: str, partitions: int) -> dict[int, tuple[int, int]]:
    client = BrokerClient(bootstrap)
    try:
        leaders = {p: info.leader for p, info in client.metadata(["demo"])["demo"].partitions.items()}
        out = {}
        for p in range(partitions):
            error, start = client.list_offset(leaders[p], "demo", p, EARLIEST)
            error_end, end = client.list_offset(leaders[p], "demo", p, LATEST)
            assert error == error_end == ErrorCode.NONE
            out[p] = (start, end)
        return out
    finally:
        client.close()


class _PageRows(HTMLParser):
    """The status page's partition rows: (topic, partition) -> {cell class: text}."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: dict[tuple[str, int], dict[str, str]] = {}
        self._row: dict[str, str] | None = None
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "partition":
            self._row = self.rows[(a["data-topic"] or "", int(a["data-partition"] or -1))] = {}
        elif tag == "td" and self._row is not None:
            classes = (a.get("class") or "").split()
            self._cell = classes[-1] if classes else "offsets"  # the bar's cell has no class
            self._row[self._cell] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None
        elif tag == "tr":
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._cell is not None:
            self._row[self._cell] += data


def _status_page(url: str) -> dict[tuple[str, int], dict[str, str]]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.status == 200 and answer.headers["Content-Type"].startswith("text/html")
        parser = _PageRows()
        parser.feed(answer.read().decode())
    return parser.rows


def test_the_readme_demo_serves_history_the_broker_has_forgotten():
    command = [str(Path(sys.executable).parent / "tiered-proxy"), "demo"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    try:
        broker = _read_until(process, r"Embedded noida broker on (\S+) \(data in (\S+)\)", 60, seen)
        broker_bootstrap, data_dir = broker.group(1), Path(broker.group(2).rstrip(")."))
        serving = _read_until(process, r"Serving on (\S+) until Ctrl-C", 120, seen)
        bootstrap = serving.group(1)
        assert bootstrap == f"127.0.0.1:{DEMO_PORT}"
        output = "".join(seen)
        # The demo's own proof: per partition Rx, Lx, Ry, log end, what it read and how much came
        # from the remote tier.
        table = {int(m[0]): tuple(int(x) for x in m[1:]) for m in re.findall(
            r"demo-(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+) \((\d+)\.\.(\d+)\)\s+(\d+)", output)}
        assert sorted(table) == [0, 1, 2], output
        total = re.search(r"read (\d+) records from offset 0 through the proxy; (\d+) of them below", output)
        assert total is not None and int(total.group(1)) == 10_000, output
        assert int(total.group(2)) == sum(row[1] - row[0] for row in table.values())
        for p, (rx, lx, ry, end, count, first, last, from_remote) in table.items():
            assert rx == 0 and lx > rx and ry + 1 == end, (p, table[p])
            assert (count, first, last, from_remote) == (end, 0, end - 1, lx), (p, table[p])
        # The status page it printed: the same offsets, drawn; the proof says where to look.
        page = re.search(r"Status page: (http://127\.0\.0\.1:\d+/) ", output)
        assert page is not None, output
        assert f"open {page.group(1)} in a browser" in output
        rows = _status_page(page.group(1))
        assert sorted(rows) == [("demo", p) for p in range(3)], rows
        for p, (rx, lx, ry, end, *_) in table.items():
            shown = rows[("demo", p)]
            assert (shown["rx"], shown["lx"], shown["ry"], shown["lz"]) == (str(rx), str(lx), str(ry), str(end)), \
                (p, shown, table[p])
        with urllib.request.urlopen(f"{page.group(1)}metrics", timeout=10) as answer:
            assert b"kafka_server_brokertopicmetrics_remotelogsizebytes" in answer.read()
        # Its copy-paste commands name this proxy and this store.
        assert f"kcat -C -b {bootstrap} -t demo -o beginning -e" in output
        assert f"describe --bootstrap-servers {bootstrap} --topic demo" in output
        assert f"segments --metadata file://{data_dir}/tiering/metadata --topic demo" in output
        remote = f"file://{data_dir}/tiering/remote"
        assert f"segments --remote {remote} --topic demo" in output
        listed = subprocess.run([sys.executable, "-m", "proxy.cli", "segments", "--remote", remote, "--topic", "demo"],
                                capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and "COPY_SEGMENT_FINISHED" in listed.stdout, listed.stderr
        assert "read from the remote tier alone: 1 topic, 3 partitions" in listed.stderr, listed.stderr
        # No client-library INFO chatter on either stream.
        assert " INFO " not in output

        # The broker, asked directly, has forgotten the start of every partition.
        at_broker = _log_starts_at_the_broker(broker_bootstrap, 3)
        for p, (log_start, log_end) in at_broker.items():
            assert log_start == table[p][1] > 0 and log_end == table[p][3], (p, at_broker[p], table[p])
        total_records = sum(end for _, end in at_broker.values())
        for client in ("kafka-python", "confluent"):
            records = consume_records(client, bootstrap, "demo", 3, total_records, isolation="read_uncommitted",
                                      timeout=60)
            for p, (_, log_end) in at_broker.items():
                offsets = [r.offset for r in records.get(p, [])]
                assert offsets == list(range(0, log_end)), (client, p, offsets[:5], len(offsets))
                assert all(r.value.startswith(b"message ") for r in records[p])

        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
        assert process.returncode == 0, stderr[-3000:]
        assert stdout.strip().splitlines()[-1] == f"Demo stopped; removed {data_dir}."
        assert not data_dir.exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


@pytest.mark.parametrize("broker", ["tansu"])
def test_the_demo_on_a_broker_that_keeps_everything_says_so(broker):
    """Tansu never moves its log start; the demo says so and serves tiered offsets remotely."""
    from tests.proxy_process import free_port

    port = free_port()
    result = subprocess.run([sys.executable, "-m", "proxy.cli", "demo", "--broker", broker, "--exit-after",
                             "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "never moves its log start" in result.stdout
    found = re.search(r"read (\d+) records from offset 0 through the proxy; (\d+) of them at tiered offsets, "
                      r"served from the remote tier", result.stdout)
    assert found is not None and int(found.group(1)) == 10_000 and int(found.group(2)) > 0, result.stdout
    assert result.stderr == "", result.stderr
