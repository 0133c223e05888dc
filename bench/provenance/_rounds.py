"""The measurement loop the provenance benchmarks share: every side of a comparison run
once per round, in the balanced orders of :func:`bench.harness.run_orders`, timed.

``setup(round)`` (optional) makes the input every side of that round gets (a retraction's
rows, say), so the sides answer the same question and their answers can be compared
round by round. A side's own ``run`` may also report the time it measured itself (a
streaming query's drain time, without building its plan): :attr:`Rounds.seconds` is then
that, else the wall time of the call.

>>> r = alternate(("a", "b"), 2, lambda side, x: {"side": side, "x": x}, setup=lambda i: i * 10)
>>> r.orders, [o["x"] for o in r.results["b"]], len(r.seconds["a"])
([('a', 'b'), ('b', 'a')], [0, 10], 2)
>>> r.ratios("a", "b") == [a / b for a, b in zip(r.seconds["a"], r.seconds["b"])]
True

:func:`paired` runs sides in pairs whose ratio is wanted, each pair back to back:

>>> paired([("a", "b"), ("c", "d")], 2, lambda side, x: side).orders
[('a', 'b', 'd', 'c'), ('c', 'd', 'b', 'a')]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.harness import run_orders


@dataclass
class Rounds:
    """Per side, one entry per round: ``seconds`` and what ``run`` returned."""

    orders: list[tuple] = field(default_factory=list)
    seconds: dict[str, list[float]] = field(default_factory=dict)
    results: dict[str, list[Any]] = field(default_factory=dict)

    def ratios(self, num: str, den: str) -> list[float]:
        """``seconds[num] / seconds[den]`` round by round (same-round pairs only)."""
        return [a / b for a, b in zip(self.seconds[num], self.seconds[den], strict=True)]


def alternate(sides: Sequence[str], rounds: int, run: Callable[[str, Any], Any],
              setup: Callable[[int], Any] | None = None, warm: Callable[[str], Any] | None = None,
              seconds_of: Callable[[Any], float] | None = None,
              log: Callable[[str, int, float, Any], None] | None = None,
              orders: Sequence[tuple] | None = None) -> Rounds:
    """Run ``run(side, setup(round))`` for every side, ``rounds`` times, each round in the
    next order of :func:`run_orders` (or of ``orders``, one per round). ``warm(side)``, if given, runs once per side first
    and is discarded; ``seconds_of(result)`` takes a run's own time (else the call's wall
    time); ``log(side, round, seconds, result)`` reports each run as it ends."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    out = Rounds(seconds={s: [] for s in sides}, results={s: [] for s in sides})
    if warm is not None:
        for s in sides:
            warm(s)
    for r, order in enumerate(orders if orders is not None else run_orders(sides, rounds)):
        arg = setup(r) if setup is not None else None
        out.orders.append(order)
        for s in order:
            t0 = time.perf_counter()
            res = run(s, arg)
            secs = time.perf_counter() - t0 if seconds_of is None else float(seconds_of(res))
            out.seconds[s].append(secs)
            out.results[s].append(res)
            if log is not None:
                log(s, r, secs, res)
    return out


def pair_orders(pairs: Sequence[tuple[str, str]], rounds: int) -> list[tuple]:
    """Each round's order for :func:`paired`: the pairs in turn (their order reversed every
    other round), each pair's two sides one right after the other, the side going first
    alternating from round to round and from pair to pair, so neither side of a pair
    always runs first, or always right after another pair."""
    out = []
    for r in range(rounds):
        idx = list(range(len(pairs))) if r % 2 == 0 else list(range(len(pairs)))[::-1]
        order: list[str] = []
        for i in idx:
            a, b = pairs[i]
            order += [a, b] if (r + i) % 2 == 0 else [b, a]
        out.append(tuple(order))
    return out


def paired(pairs: Sequence[tuple[str, str]], rounds: int, run: Callable[[str, Any], Any],
           setup: Callable[[int], Any] | None = None, warm: Callable[[str], Any] | None = None,
           seconds_of: Callable[[Any], float] | None = None,
           log: Callable[[str, int, float, Any], None] | None = None) -> Rounds:
    """:func:`alternate` for sides compared in ``pairs`` (a ratio per pair and round): the
    two sides of a pair run back to back in every round (:func:`pair_orders`), so a
    machine whose speed drifts within the run moves both alike."""
    return alternate([s for p in pairs for s in p], rounds, run, setup, warm, seconds_of, log,
                     orders=pair_orders(pairs, rounds))
