"""Run the real ``tiered-proxy serve`` command as a subprocess for tests and benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.cpu_sets import pin_tree
from tests.kafka_cluster import restartable_ports


def free_port() -> int:
    """A free port below the ephemeral range: a port the kernel handed out as free can be taken by
    any outgoing connection (the proxy's own, to the brokers) before the proxy binds it; seen in CI."""
    return restartable_ports(1)[0]


def broker_node_ids(bootstrap: str) -> list[int]:
    from protocol.apis import METADATA
    from tests.raw import RawClient

    client = RawClient(bootstrap)
    try:
        resp = client.request(METADATA, 1, {"topics": []})
    finally:
        client.close()
    return sorted(b["node_id"] for b in resp["brokers"])


@dataclass
class ProxyProcess:
    port: int
    node_ports: dict[int, int]
    process: subprocess.Popen
    log_path: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ports(self) -> set[int]:
        return {self.port, *self.node_ports.values()}

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode


def start_proxy(upstream_bootstrap: str, work_dir: Path, *extra_args: str, timeout: float = 30,
                scheme: str = "", node_ids: list[int] | None = None, source: Path | None = None,
                port: int | None = None, cpus: frozenset[int] | None = None) -> ProxyProcess:
    """Start ``tiered-proxy serve`` on free loopback ports; node ports are mapped explicitly. ``source``:
    run the proxy of another checkout (a benchmark's baseline) instead of this one. ``cpus``: pin it,
    every thread, to these CPUs once it listens (benchmarks: tests/cpu_sets.py). A port chosen here
    and taken by another process before the proxy bound it is chosen afresh, once."""
    nodes = node_ids or broker_node_ids(upstream_bootstrap)
    for attempt in (1, 2):
        try:
            return _start_once(upstream_bootstrap, work_dir, extra_args, timeout, scheme, nodes, source,
                               port or free_port(), cpus)
        except _PortTaken:
            if attempt == 2 or port is not None:
                raise
    raise AssertionError("unreachable")


class _PortTaken(RuntimeError):
    pass


def _start_once(upstream_bootstrap: str, work_dir: Path, extra_args: tuple[str, ...], timeout: float,
                scheme: str, node_ids: list[int], source: Path | None, port: int,
                cpus: frozenset[int] | None) -> ProxyProcess:
    work_dir.mkdir(parents=True, exist_ok=True)
    node_ports = {node: free_port() for node in node_ids}
    mapping = ",".join(f"{n}:{p}" for n, p in node_ports.items())
    log_path = work_dir / f"proxy-{port}.log"
    cmd = [
        sys.executable, "-m", "proxy.cli", "serve",
        "--bootstrap-servers", upstream_bootstrap,
        "--listen", f"{scheme}127.0.0.1:{port}",
        "--set", f"proxy.broker.port.map={mapping}",
        "--data-dir", str(work_dir / f"data-{port}"),
        *extra_args,
    ]
    log_file = open(log_path, "wb")  # noqa: SIM115 - the child keeps writing to it
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    process = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
                               env=env, cwd=source)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = log_path.read_text()
            taken = [p for p in (port, *node_ports.values()) if f"127.0.0.1:{p}" in log]
            error = _PortTaken if "Address already in use" in log and taken else RuntimeError
            raise error(f"proxy exited with {process.returncode}:\n{log[-3000:]}")
        if b"proxy listening on" in log_path.read_bytes():
            if cpus is not None:
                pin_tree(process.pid, cpus)
            return ProxyProcess(port, node_ports, process, log_path)
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"proxy did not start within {timeout}s:\n{log_path.read_text()[-3000:]}")


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def connections_of_process(pid: int | None = None) -> set[tuple[int, int]]:
    """(socket inode, remote TCP port) of the established connections this process (or ``pid``) holds."""
    pid = pid or os.getpid()
    mine = _socket_inodes(pid)
    found: set[tuple[int, int]] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            state, inode = cols[3], int(cols[9])
            if inode in mine and state == "01":  # ESTABLISHED
                found.add((inode, int(cols[2].rsplit(":", 1)[1], 16)))
    return found


def remote_ports_of_process(pid: int | None = None) -> set[int]:
    """Remote TCP ports of the established connections this process (or ``pid``) holds."""
    return {port for _, port in connections_of_process(pid)}


class RemotePortSampler:
    """Records, every ``interval`` seconds in a background thread, which remote ports this process
    opens TCP connections to while it runs (connections held from before, e.g. a session fixture's
    own client of a shared broker, are not the clients under test). Used to prove clients only
    ever talk to the proxy."""

    def __init__(self, interval: float = 0.05) -> None:
        import threading

        self.interval = interval
        self.seen: set[int] = set()
        self._before: set[int] = set()  # socket inodes open when sampling began
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seen |= {port for inode, port in connections_of_process() if inode not in self._before}
            self._stop.wait(self.interval)

    def __enter__(self) -> RemotePortSampler:
        self._before = {inode for inode, _ in connections_of_process()}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
