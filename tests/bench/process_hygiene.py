"""A benchmark's own cleanup: SIGTERM ends it through every ``finally`` as Ctrl-C does, and the
child processes it started (brokers, proxies) that are still running when it ends are stopped by PID."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType


def running_children() -> list[int]:
    """PIDs of this process's children that have not exited (Linux /proc)."""
    me, children = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
        except OSError:  # gone meanwhile
            continue
        if int(ppid) == me and state != "Z":
            children.append(int(stat.parent.name))
    return children


def stop_leftover_children(timeout: float = 10) -> None:
    """Stops every child process of this one still running (e.g. a proxy whose start Ctrl-C cut
    short), by PID: its process group if it leads one (the proxies and the broker do), else
    itself; SIGTERM, then SIGKILL after ``timeout``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        children = running_children()
        if not children:
            return
        print(f"stopping leftover child processes {children} ({sig.name})", file=sys.stderr)
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                if os.getpgid(pid) == pid:
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while running_children() and time.monotonic() < deadline:
            time.sleep(0.1)


def exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends the bench like Ctrl-C: through the cleanup of every ``finally``."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def run_in_work_dir(prefix: str, keep: bool, run: Callable[[Path], None]) -> None:
    """``run`` in a new temporary folder, ended by SIGTERM as by Ctrl-C; then the children still
    running are stopped and the folder removed (kept, and named, when ``keep``)."""
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        run(work)
    finally:
        stop_leftover_children()
        if keep:
            print(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
