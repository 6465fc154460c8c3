"""The proxy's status page in a real browser: headless Chromium (Debian's ``chromium``, driven by
selenium through Debian's ``chromedriver``; tests/prerequisites.sh installs both) loads the page of
a proxy in front of the session's Apache Kafka, with two tiered topics whose older offsets are
only in the remote tier. Per partition the page's Rx, Ry, Lx, Lz and segment count equal what
``tiered-proxy describe`` reports through the same proxy; the topic names in the rendered DOM are
exactly the names (text, no element inside); the browser logs no error; and a screenshot is kept
(under the test's tmp dir, copied to tests/artifacts/status-page.png); and each topic's cost on
the page equals what ``tiered-proxy describe --cost`` reports. Escaping of names Kafka would refuse
(``<script>``) is proven on the renderer: tests/unit/test_status_page.py."""

from __future__ import annotations

import base64
import contextlib
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.describe import PartitionRow, describe, describe_costs
from proxy.status_page import cost_cells
from tests.admin_clients import Admin
from tests.clients import consume_records
from tests.kafka_cluster import stop_processes, track_process
from tests.proxy_process import ProxyProcess, free_port, start_proxy
from tests.tiering_checks import produce_numbered, wait_until

CHROMIUM = "/usr/bin/chromium"  # Debian's chromium
CHROMEDRIVER = "/usr/bin/chromedriver"  # Debian's chromium-driver (dpkg -L chromium-driver)
ARTIFACT = Path(__file__).resolve().parents[1] / "artifacts" / "status-page.png"
SEGMENT_BYTES = 16 * 1024  # the proxy's remote segments; the records below make ~10 per partition
LOCAL_RETENTION_BYTES = 32 * 1024
TOPICS = {"status-page": (3, 3000), "Status_page.names": (1, 600)}  # name prefix -> (partitions, records)

pytestmark = pytest.mark.skipif(not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()),
                                reason="needs Debian's chromium and chromium-driver (tests/prerequisites.sh)")

# One pass over the DOM, in the page's own state (it reloads itself every 5 s: element handles kept
# across a reload would go stale): per partition row its attributes and cell texts.
READ_ROWS = """
return Array.from(document.querySelectorAll('tr.partition')).map(row => {
  const cell = cls => row.querySelector('td.' + cls).textContent;
  const topic = row.querySelector('td.topic');
  return {topic: topic.textContent, topicChildren: topic.children.length, dataTopic: row.dataset.topic,
          partition: Number(row.dataset.partition), rx: cell('rx'), ry: cell('ry'), lx: cell('lx'),
          lz: cell('lz'), segments: cell('segments'), lag: cell('lag'), remoteBytes: cell('remote-bytes'),
          lost: cell('lost'), diverged: cell('diverged'), bars: row.querySelectorAll('svg.bar rect').length};
});
"""


# Per topic row of the cost table: the text of each of its cells, by class.
READ_COSTS = """
return Array.from(document.querySelectorAll('tr.cost')).map(row => [row.dataset.topic,
  Object.fromEntries(Array.from(row.querySelectorAll('td.num')).map(td => [td.classList[1], td.textContent]))]);
"""


@contextlib.contextmanager
def headless_chromium(work: Path) -> Iterator[object]:
    """A selenium session on Debian's chromium; chromedriver (and the browser it starts) in a
    process group of its own, tracked, and stopped by that group when done."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--window-size=1400,1000",
                f"--user-data-dir={work / 'chromium-profile'}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=CHROMEDRIVER, log_output=str(work / "chromedriver.log"),
                      popen_kw={"start_new_session": True})
    driver = None
    try:
        driver = webdriver.Chrome(options=options, service=service)
        track_process(service.process)
        driver.set_page_load_timeout(20)
        driver.set_script_timeout(10)
        yield driver
    finally:
        if driver is not None:
            with contextlib.suppress(Exception):
                driver.quit()
        process = getattr(service, "process", None)
        if process is not None:
            stop_processes([process], timeout=5)


def _settled(rows: list[PartitionRow]) -> bool:
    """Tiered to the log end, and the brokers' log start moved past the remote log start."""
    return bool(rows) and all(r.ry is not None and r.rx is not None and r.ry + 1 == r.lz and r.lx > r.rx
                              for r in rows)


def _as_page(r: PartitionRow) -> dict[str, object]:
    """What the page must show for a row of ``describe``."""
    return {"topic": r.topic, "partition": r.partition, "rx": "-" if r.rx is None else str(r.rx),
            "ry": "-" if r.ry is None else str(r.ry), "lx": str(r.lx), "lz": str(r.lz), "segments": str(r.segments),
            "lag": str(r.lag), "remoteBytes": str(r.remote_bytes), "lost": str(r.lost), "diverged": str(r.diverged)}


@pytest.fixture
def tiered_proxy(kafka, tmp_path: Path, unique_name: str) -> Iterator[tuple[ProxyProcess, int, list[str]]]:
    """A proxy with the status page on, and the TOPICS tiered through it and trimmed."""
    metrics_port = free_port()
    proxy = start_proxy(kafka.bootstrap, tmp_path / "proxy", "--set", f"proxy.metrics.listen=127.0.0.1:{metrics_port}",
                        "--set", "remote.log.manager.task.interval.ms=100", "--set", f"log.segment.bytes={SEGMENT_BYTES}",
                        "--set", "log.roll.ms=1000")
    track_process(proxy.process)
    try:
        topics = [f"{prefix}-{unique_name}" for prefix in TOPICS]
        admin = Admin("confluent", proxy.bootstrap)
        for topic, (partitions, records) in zip(topics, TOPICS.values(), strict=True):
            admin.create_topic(topic, partitions, {"remote.storage.enable": "true",
                                                   "local.retention.bytes": str(LOCAL_RETENTION_BYTES)})
            produce_numbered(proxy.bootstrap, topic, 0, records, partitions)
        assert wait_until(lambda: all(_settled(describe(proxy.bootstrap, t)) for t in topics), 60), \
            [describe(proxy.bootstrap, t) for t in topics]
        yield proxy, metrics_port, topics
    finally:
        stop_processes([proxy.process], timeout=15)


def test_the_status_page_shows_what_describe_shows(tiered_proxy, tmp_path: Path) -> None:
    proxy, metrics_port, topics = tiered_proxy
    # A read from offset 0: remote reads for the page's recent activity.
    partitions, records = TOPICS["status-page"]
    consume_records("confluent", proxy.bootstrap, topics[0], partitions, records, timeout=60)
    url = f"http://127.0.0.1:{metrics_port}/"
    with headless_chromium(tmp_path) as driver:
        driver.get(url)
        assert driver.title == "tiered-proxy status"
        want = sorted((_as_page(r) for t in topics for r in describe(proxy.bootstrap, t)),
                      key=lambda row: (row["topic"], row["partition"]))
        deadline = time.monotonic() + 15
        for _ in range(30):  # the topics are quiet: the first look should already agree
            rows = [row for row in driver.execute_script(READ_ROWS) if row["topic"] in topics]
            got = sorted(({k: row[k] for k in want[0]} for row in rows), key=lambda r: (r["topic"], r["partition"]))
            if got == want or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
            driver.refresh()
        assert got == want
        assert len(want) == sum(p for p, _ in TOPICS.values())
        for row in rows:
            # The names are text: no element inside the cell, and the attribute reads back the same.
            assert row["topicChildren"] == 0 and row["dataTopic"] == row["topic"], row
            assert row["bars"] >= 4  # track, remote, local, overlap
        # Each topic's last hour of cost: the figures describe --cost prints, the topic read from
        # offset 0 with GETs, the other with none.
        deadline = time.monotonic() + 30
        while True:
            costs = {c.topic: {cls: text for cls, text in cost_cells(c)} for c in describe_costs(proxy.bootstrap)
                     if c.topic in topics}
            shown = {topic: cells for topic, cells in driver.execute_script(READ_COSTS) if topic in topics}
            if (shown == costs and costs == {c.topic: {cls: text for cls, text in cost_cells(c)}
                                             for c in describe_costs(proxy.bootstrap) if c.topic in topics}) \
                    or time.monotonic() >= deadline:
                break
            time.sleep(1)
            driver.refresh()
        assert shown == costs and set(costs) == set(topics)
        assert int(costs[topics[0]]["get"]) > 0 and costs[topics[1]]["get"] == "0", costs
        assert all(int(cells["put"]) > 0 and int(cells["stored-bytes"]) > 0 for cells in costs.values())
        text = driver.find_element("tag name", "body").text
        assert "One proxy process" in text and "Remote tier" in text
        assert "Remote tier cost per topic (USD)" in text and "the last hour x 730" in text
        # (Copy errors may be counted: a new topic's leader can refuse the copier's first ListOffsets.)
        assert "0 remote read errors" in text and "0 failed remote store requests" in text
        served = driver.execute_script(
            "return document.querySelector('tr.series[data-series=\"read_bytes\"]').textContent")
        assert "served from the remote tier in 0 reads" not in served, served
        brokers = driver.execute_script(
            "return Array.from(document.querySelectorAll('tr.broker')).map(r => [r.dataset.node, r.dataset.state,"
            " r.querySelector('td.port').textContent])")
        assert brokers == [[str(node), "reachable", str(port)] for node, port in sorted(proxy.node_ports.items())]

        # The whole document, not just the window: Chromium's DevTools protocol renders beyond it.
        size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        image = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
            "x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
        shot = tmp_path / "status-page.png"
        shot.write_bytes(base64.b64decode(image["data"]))
        assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 10_000
        ARTIFACT.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, ARTIFACT)
        print(f"\nstatus page screenshot: {ARTIFACT} (and {shot})")
        errors = [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]
        assert errors == [], errors
    # The metrics stay where Prometheus scrapes them.
    with urllib.request.urlopen(f"{url}metrics", timeout=10) as answer:
        assert b"tiered_proxy_connections" in answer.read()
