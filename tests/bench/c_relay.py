"""tests/bench/splice_relay.c, built and run: the least a relay can do, as a floor beside the proxy.

A benchmark builds it once with the machine's C compiler (:func:`build`) and starts it
(:func:`start`) in front of a broker port. For Kafka clients, that is the RELAYED listener of a
broker started with ``start_single(..., relayed_port=port)``: clients that bootstrap at the relay
are told the broker is at the relay's port, so all their traffic passes through it. The relay reads
nothing it carries, so the proxy's own cost is what it adds beyond this.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.bench.workers import process_cpu_seconds

SOURCE = Path(__file__).with_name("splice_relay.c")


def build(work: Path) -> Path | None:
    """The relay's executable, compiled into ``work``; None (and why, printed) where it cannot be."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        print("no C compiler (cc, gcc): the C relay is left out", flush=True)
        return None
    out = work / "splice_relay"
    done = subprocess.run([compiler, "-O2", "-pthread", "-o", str(out), str(SOURCE)],
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        print(f"{SOURCE.name} did not build ({compiler}): the C relay is left out\n{done.stderr[-1000:]}", flush=True)
        return None
    return out


@dataclass
class CRelay:
    process: subprocess.Popen[bytes]
    bootstrap: str

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.process.pid)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)


def start(executable: Path, port: int, upstream: str) -> CRelay:
    """The relay on 127.0.0.1:``port``, in front of ``upstream`` ("127.0.0.1:PORT"; for Kafka
    clients, a broker's RELAYED listener: ``broker.bootstraps["RELAYED"]``)."""
    process = subprocess.Popen([str(executable), str(port), upstream.rsplit(":", 1)[1]])
    return CRelay(process, f"127.0.0.1:{port}")
