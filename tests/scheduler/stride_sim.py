"""Drivers that play the Recall Manager's part against a scheduler, for the tests."""

from __future__ import annotations

import random
from collections.abc import Callable

from scheduler import StrideScheduler


def run_sequential(
    s: StrideScheduler,
    quanta: int,
    *,
    results: Callable[[str], int] = lambda _tid: 0,
    arrivals: dict[int, list[Callable[[], str]]] | None = None,
    load: float | None = None,
) -> list[str]:
    """Grant and complete ``quanta`` quanta one at a time (N = 1); ``arrivals[k]`` are
    submitted before the k-th choice. Returns the granted task ids in order."""
    trace: list[str] = []
    for k in range(quanta):
        for submit in (arrivals or {}).get(k, []):
            submit()
        g = s.choose(load=load)
        if g is None:
            break
        trace.append(g.task_id)
        s.complete(g.task_id, results=results(g.task_id))
    return trace


def run_concurrent(
    s: StrideScheduler,
    quanta: int,
    *,
    slots: int,
    rng: random.Random,
    arrivals: dict[int, list[Callable[[], str]]] | None = None,
) -> list[tuple[int, str]]:
    """Keep up to ``slots`` quanta in flight; complete a random one whenever the slots
    are full or nothing is runnable. Returns (grant number, task id) in grant order,
    with submissions numbered on the same clock of grants."""
    trace: list[tuple[int, str]] = []
    flying: list[str] = []
    k = 0
    while k < quanta:
        for submit in (arrivals or {}).pop(k, []):
            submit()
        g = s.choose() if len(flying) < slots else None
        if g is None:
            if not flying:
                if not arrivals:
                    break
                k = min(arrivals)  # idle until the next arrival
                continue
            done = flying.pop(rng.randrange(len(flying)))
            s.complete(done)
            continue
        flying.append(g.task_id)
        trace.append((k, g.task_id))
        k += 1
    for tid in flying:
        s.complete(tid)
    return trace
