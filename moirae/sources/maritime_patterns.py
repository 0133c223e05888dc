"""The maritime behaviours of T Defs. 5.10-5.16 as ``MATCH_RECOGNIZE`` pattern queries.

Each query reads the ``vessels`` stream (the rows of :mod:`moirae.sources.maritime`),
partitions by vessel and orders by event time, and is written in the subset that
Moirae's pattern language and Flink SQL share: one row per match, ``AFTER MATCH SKIP
PAST LAST ROW``, ``WITHIN``, and a pattern that does not end on a greedy quantifier
(Flink refuses that), so a behaviour that must hold "for at least three messages" is
``A{3,} B`` with ``B`` the first row where it no longer holds. The measures are the
vessel, ``start_ts`` and ``end_ts`` (the first and last row of the behaviour), the
number of rows and the mean speed. The patterns read only row columns, so both engines
evaluate the same predicates.

:func:`variants` gives the benchmark's larger workloads (T 5.2.3: the paper's 1, 16 and
48 patterns): the seven behaviours, then the approach of each port (T Def. 5.16, "N
patterns ... almost identical except for the argument passed to DistanceToPort"), then
the behaviours again with other thresholds.

>>> sorted(BEHAVIOUR_PATTERNS) == sorted(BEHAVIOURS)
True
>>> [name for name, _ in variants(9)][6:]
['approach', 'approach_P00', 'approach_P01']
"""

from __future__ import annotations

from moirae.sources.maritime_geo import PORT_NAMES
from moirae.sources.maritime_track import BEHAVIOURS

WITHIN = "INTERVAL '1' HOUR"

#: T Defs. 5.10-5.15: (condition that holds on each row of the behaviour, minimum rows)
CONDITIONS = {
    "hsnc": ("near_coast = TRUE AND speed > {speed}", 1, {"speed": 5}),
    "anchored": ("(near_port = TRUE OR in_anchorage = TRUE) AND speed < {speed}", 3, {"speed": 0.5}),
    "drifting": ("heading_diff > {angle} AND speed > {speed}", 3, {"angle": 30, "speed": 0.5}),
    "trawling": ("ship_type = 'fishing' AND in_fishing = TRUE AND speed > {lo} AND speed < {hi}", 3,
                 {"lo": 1.0, "hi": 9.0}),
    "sar": ("heading_change > {angle} AND ship_type = 'sar' AND speed > {speed}", 3, {"angle": 15, "speed": 2.7}),
    "loitering": ("near_port = FALSE AND near_coast = FALSE AND speed < {speed}", 3, {"speed": 0.5}),
}


def run_pattern(condition: str, min_rows: int) -> str:
    """A behaviour that holds on ``min_rows`` or more consecutive rows of a vessel."""
    quant = "+" if min_rows == 1 else f"{{{min_rows},}}"
    return f"""SELECT * FROM vessels MATCH_RECOGNIZE (
  PARTITION BY vessel_id
  ORDER BY ts
  MEASURES FIRST(A.ts) AS start_ts, LAST(A.ts) AS end_ts, COUNT(A.ts) AS n_rows, AVG(A.speed) AS avg_speed
  ONE ROW PER MATCH
  AFTER MATCH SKIP PAST LAST ROW
  PATTERN (A{quant} B)
  WITHIN {WITHIN}
  DEFINE A AS {condition},
         B AS NOT ({condition})
)"""


def approach_pattern(port: str | None = None, far: float = 7.0, mid: float = 5.0, outer: float = 10.0) -> str:
    """T Def. 5.16: one row between ``far`` and ``outer`` km of a port, then one or more
    between ``mid`` and ``far``, then one inside ``mid`` (``port``: only that port)."""
    only = f" AND nearest_port = '{port}'" if port else ""
    return f"""SELECT * FROM vessels MATCH_RECOGNIZE (
  PARTITION BY vessel_id
  ORDER BY ts
  MEASURES FIRST(A.ts) AS start_ts, LAST(C.ts) AS end_ts, COUNT(B.ts) AS n_rows, AVG(B.speed) AS avg_speed
  ONE ROW PER MATCH
  AFTER MATCH SKIP PAST LAST ROW
  PATTERN (A B+ C)
  WITHIN {WITHIN}
  DEFINE A AS dist_port_km > {far} AND dist_port_km < {outer}{only},
         B AS dist_port_km > {mid} AND dist_port_km < {far}{only},
         C AS dist_port_km < {mid}{only}
)"""


def behaviour_pattern(name: str, **thresholds) -> str:
    """The query of behaviour ``name`` (T Defs. 5.10-5.16), thresholds overridable."""
    if name == "approach":
        return approach_pattern(**thresholds)
    cond, min_rows, defaults = CONDITIONS[name]
    return run_pattern(cond.format(**{**defaults, **thresholds}), min_rows)


BEHAVIOUR_PATTERNS = {name: behaviour_pattern(name) for name in BEHAVIOURS}

_RETUNED = [  # the behaviours with other thresholds, for the larger workloads
    ("hsnc", {"speed": s}) for s in (6, 7, 8, 9, 10, 11, 12)
] + [("anchored", {"speed": s}) for s in (0.4, 0.3, 0.2)] + [
    ("drifting", {"angle": a, "speed": s}) for a in (35, 40, 45, 60) for s in (0.5, 1.0)
] + [("trawling", {"lo": lo, "hi": hi}) for lo, hi in ((1.5, 8.0), (2.0, 7.0), (2.5, 6.0), (3.0, 5.5))] + [
    ("sar", {"angle": a, "speed": 2.7}) for a in (20, 25, 30)
] + [("loitering", {"speed": s}) for s in (0.4, 0.3, 0.2)] + [
    ("approach", {"far": f, "mid": m, "outer": 10.0}) for f, m in ((8.0, 5.0), (7.0, 4.0), (6.5, 4.5), (8.0, 6.0))
]


def variants(n: int) -> list[tuple[str, str]]:
    """The first ``n`` of: the seven behaviours, the approach of each port, the retuned
    behaviours (``(name, query)`` pairs, names unique)."""
    out = [(b, BEHAVIOUR_PATTERNS[b]) for b in BEHAVIOURS]
    out += [(f"approach_{p}", approach_pattern(str(p))) for p in PORT_NAMES]
    for i, (b, th) in enumerate(_RETUNED):
        out.append((f"{b}_v{i}", behaviour_pattern(b, **th)))
    if n > len(out):
        raise ValueError(f"at most {len(out)} maritime pattern variants, asked for {n}")
    return out[:n]
