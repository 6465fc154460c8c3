"""Worker processes: ``proxy.workers=N`` runs N proxies that share the listening ports, so the
proxy uses N cores (one Python process is bound to about one by its GIL).

Every worker binds the same ports with ``SO_REUSEPORT`` and the kernel spreads new client
connections over them; a connection lives in one worker for its whole life, so fetch sessions,
request order and SASL state stay where they are. Each worker is a whole proxy, exactly like one
instance of a scale-out group: the workers share the remote tier and a metadata topic, and divide
the copying with the same consumer group. That is why more than one worker needs
``remote.log.metadata.uri=topic://...`` (the embedded journal has a single writer) unless tiering
is switched off.

The process started by ``tiered-proxy serve`` becomes the supervisor: it starts the workers,
restarts one that dies (after a pause that doubles while it keeps dying), passes SIGTERM/SIGINT on
and exits when they have. Per worker ``i`` (from 0) it sets ``proxy.worker.index=i``, the data
directory ``{proxy.data.dir}/worker-{i}`` (spool files), the remote tier the supervisor resolved
(so a default ``{data dir}/remote`` stays shared) and, with ``proxy.metrics.listen=HOST:PORT``,
the metrics endpoint ``HOST:PORT+i``.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

from proxy.config import ConfigError, ProxyConfig
from tiering.config import STORAGE_URI_CONFIG, TieringConfig
from tiering.service import DATA_DIR_CONFIG, DEFAULT_DATA_DIR, METADATA_URI_CONFIG

log = logging.getLogger("tiered-proxy")

WORKERS_CONFIG = "proxy.workers"
WORKER_INDEX_CONFIG = "proxy.worker.index"
_STOP_GRACE_S = 30.0
_FAILING_AT_START_S = 10.0  # a worker that dies this soon after starting, this often, stops all
_FAILURES_AT_START = 3


def check_workers(props: Mapping[str, str], workers: int) -> None:
    """More than one worker needs a metadata store they can share."""
    if workers <= 1 or not TieringConfig.from_properties(props).enabled:
        return
    metadata = props.get(METADATA_URI_CONFIG)
    if not str(metadata or "").startswith("topic:"):
        store = f"the embedded journal {metadata}" if metadata else "the embedded journal (the default)"
        raise ConfigError(
            f"{WORKERS_CONFIG}={workers} needs a metadata store the workers share: set --metadata topic:// "
            f"({METADATA_URI_CONFIG}); {store} has a single writer")


def worker_overrides(props: Mapping[str, str], index: int, metrics: tuple[str, int] | None) -> dict[str, str]:
    """The settings that differ for worker ``index`` (``props``: the tiering keys; ``metrics``:
    the parsed proxy.metrics.listen)."""
    data_dir = Path(str(props.get(DATA_DIR_CONFIG) or DEFAULT_DATA_DIR)).resolve()
    out = {
        WORKER_INDEX_CONFIG: str(index),
        DATA_DIR_CONFIG: str(data_dir / f"worker-{index}"),
        STORAGE_URI_CONFIG: str(props.get(STORAGE_URI_CONFIG) or f"file://{data_dir}/remote"),
    }
    if metrics is not None:
        host, port = metrics
        out["proxy.metrics.listen"] = f"{host}:{port + index if port else 0}"
    return out


class Supervisor:
    """Runs ``proxy.workers`` copies of ``tiered-proxy serve ARGV`` and keeps them running."""

    def __init__(self, argv: list[str], config: ProxyConfig) -> None:
        self.argv = argv
        self.props = config.extra
        self.metrics = config.metrics_listen
        self.workers = config.workers
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self._started_at: dict[int, float] = {}
        self._failures: dict[int, int] = {}
        self._stopping = False

    def _command(self, index: int) -> list[str]:
        sets = [arg for key, value in worker_overrides(self.props, index, self.metrics).items() for arg in ("--set", f"{key}={value}")]
        return [sys.executable, "-m", "proxy.cli", *self.argv, *sets]

    def _start(self, index: int) -> None:
        process = subprocess.Popen(self._command(index))  # its log lines go where ours go
        self.processes[index] = process
        self._started_at[index] = time.monotonic()
        log.info("worker %d started (pid %d)", index, process.pid)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if not self._stopping:
            log.info("received %s, stopping %d workers", signal.Signals(signum).name, len(self.processes))
        self._stopping = True

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for index in range(self.workers):
            self._start(index)
        code = 0
        restart_at: dict[int, float] = {}
        while not self._stopping:
            time.sleep(0.2)
            now = time.monotonic()
            for index, process in list(self.processes.items()):
                if index in restart_at or process.poll() is None:
                    continue
                early = now - self._started_at[index] < _FAILING_AT_START_S
                self._failures[index] = self._failures.get(index, 0) + 1 if early else 1
                if process.returncode == 2 or self._failures[index] >= _FAILURES_AT_START:
                    log.error("worker %d (pid %d) exited with %d %s; stopping the proxy", index, process.pid,
                              process.returncode, "(configuration error)" if process.returncode == 2 else
                              f"{self._failures[index]} times within {_FAILING_AT_START_S:g}s of starting")
                    code = process.returncode or 1
                    self._stopping = True
                    break
                pause = min(2.0 ** (self._failures[index] - 1), 30.0)
                log.warning("worker %d (pid %d) exited with %d; restarting it in %gs", index, process.pid,
                            process.returncode, pause)
                restart_at[index] = now + pause
            for index, when in list(restart_at.items()):
                if not self._stopping and now >= when:
                    del restart_at[index]
                    self._start(index)
        self._stop_all()
        return code

    def _stop_all(self) -> None:
        running = [p for p in self.processes.values() if p.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_S
        for process in running:
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                log.warning("worker pid %d did not stop within %gs; killing it", process.pid, _STOP_GRACE_S)
                process.kill()
                process.wait()
