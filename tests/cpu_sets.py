"""Where a benchmark's processes run: the proxy on CPUs of its own, the broker and the clients on
the others (issue 36). On a 2-core machine an unpinned comparison with direct measures the machine:
the proxy's second hop takes its CPU from the same two cores the broker and the clients fill. With
the proxy pinned to one core and everything else to the other (in the direct runs too), the ratio
measures the proxy.

Pin the benchmark's own process with :func:`pin_self` before it starts the broker: the broker, and
every thread the clients start, inherit its CPUs. Then :func:`pin_tree` moves each proxy, with all
its threads and child processes, to the proxy's CPUs; threads it starts later inherit them.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Placement:
    """CPUs for the broker and the clients, and for the proxy; None: wherever the kernel likes."""

    others: frozenset[int] | None = None
    proxy: frozenset[int] | None = None

    @property
    def isolated(self) -> bool:
        return self.proxy is not None

    def describe(self) -> str:
        if not self.isolated:
            return f"shared: every process on CPUs {_cpus(os.sched_getaffinity(0))}"
        return f"isolated: the proxy on CPUs {_cpus(self.proxy)}, the broker and the clients on CPUs {_cpus(self.others)}"


def _cpus(cpus: frozenset[int] | set[int] | None) -> str:
    return ",".join(map(str, sorted(cpus or ())))


def placement(isolate: bool) -> Placement:
    """The proxy on the upper half of the CPUs this process may use, the rest below (one and one on
    two cores); shared where ``isolate`` is off or there is a single CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if not isolate or len(cpus) < 2:
        return Placement()
    half = len(cpus) // 2
    return Placement(frozenset(cpus[:half]), frozenset(cpus[half:]))


def placement_names(text: str) -> list[str]:
    """A benchmark's ``--placements``: "isolated", "shared" or both, comma-separated."""
    names = text.split(",")
    if not names or set(names) - {"isolated", "shared"}:
        raise argparse.ArgumentTypeError(f"{text!r}: isolated, shared or both (isolated,shared)")
    return names


def pin_self(where: Placement) -> None:
    """This process's threads (and so what it starts from now on) to the broker's and clients' CPUs."""
    if where.others is not None:
        pin_tree(os.getpid(), where.others)


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except FileNotFoundError:
        return []


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for tid in _tasks(pid):
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except FileNotFoundError:
            continue
    return out


def pin_tree(pid: int, cpus: frozenset[int]) -> int:
    """Every thread of ``pid`` and of its descendants to ``cpus``; how many threads were moved."""
    moved = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        for tid in _tasks(current):
            try:
                os.sched_setaffinity(tid, cpus)
                moved += 1
            except (ProcessLookupError, PermissionError):
                continue  # a thread that ended meanwhile
        pending += _children(current)
    return moved
