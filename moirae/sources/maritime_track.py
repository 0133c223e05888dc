"""One vessel's track, built leg by leg, and the planted behaviours of T Defs. 5.10-5.16.

A :class:`Track` holds a vessel's rows (plane position in km, speed over ground in
knots, course and heading in degrees, AIS status), one every ``period_s`` seconds.
``sail`` appends a straight transit leg; each ``plant_*`` function appends one episode
of a behaviour (or, with ``decoy=True``, a near miss that must not match) and returns
the ground truth it planted as ``(behaviour, first_row, last_row)`` positions in the
track. The episodes are built so that each behaviour's predicates hold on exactly the
planted rows and on no row around them (the rows before and after sail at transit speed,
with heading along course); the approach of a port is recorded from the geometry of the
rows as emitted (T Def. 5.16: its last row farther than 7 km, its rows between 5 and
7 km, its first row nearer than 5 km).

>>> import numpy as np
>>> t = Track(np.random.default_rng(1), 30.0, 10.0, 30.0)
>>> t.sail(40.0, 30.0, 12.0)
>>> len(t), round(float(t.x[-1]), 1)
(162, 40.0)
"""

from __future__ import annotations

import math

import numpy as np

from moirae.sources.maritime_geo import LANE_Y_KM, PORT_X, WIDTH_KM, angle_diff, in_fishing, port_distances

KNOT_KMH = 1.852
#: transit speeds (knots): above every behaviour's speed band (trawling ends at 9)
TRANSIT_KN = (10.0, 15.0)
#: T Def. 5.14: a heading change above this many degrees counts as "changes its heading"
HEADING_CHANGE_DEG = 15.0
BEHAVIOURS = ("hsnc", "anchored", "drifting", "trawling", "sar", "loitering", "approach")
STATUS = ("under_way", "at_anchor", "engaged_in_fishing", "restricted_manoeuvrability")

Truth = tuple[str, int, int]


def bearing(dx: float, dy: float) -> float:
    """Course in degrees clockwise from north of a move (dx east, dy north)."""
    return math.degrees(math.atan2(dx, dy)) % 360.0


class Track:
    """A vessel's rows so far, in columns; the vessel starts at (x, y)."""

    def __init__(self, rng: np.random.Generator, period_s: float, x: float, y: float) -> None:
        self.rng, self.period_s = rng, period_s
        self._cols: dict[str, list[np.ndarray]] = {k: [] for k in ("x", "y", "speed", "course", "heading", "status")}
        self._n = 0
        self.pos = (x, y)
        self.last_heading = float(rng.uniform(0, 360))

    def __len__(self) -> int:
        return self._n

    def column(self, name: str) -> np.ndarray:
        parts = self._cols[name]
        return np.concatenate(parts) if parts else np.zeros(0)

    @property
    def x(self) -> np.ndarray:
        return self.column("x")

    def add(self, x, y, speed, course, heading, status: int = 0) -> None:
        """Append rows (arrays of one length; ``status`` an index into :data:`STATUS`)."""
        x = np.atleast_1d(np.asarray(x, float))
        n = len(x)
        for k, v in (("x", x), ("y", y), ("speed", speed), ("course", course), ("heading", heading)):
            self._cols[k].append(np.broadcast_to(np.asarray(v, float), (n,)).copy())
        self._cols["status"].append(np.full(n, status, dtype=np.int8))
        self._n += n
        self.pos = (float(x[-1]), float(np.atleast_1d(y)[-1]))
        self.last_heading = float(np.atleast_1d(heading)[-1]) % 360.0

    def step_km(self, knots: float) -> float:
        return knots * KNOT_KMH * self.period_s / 3600.0

    def sail(self, x: float, y: float, knots: float | None = None) -> None:
        """Sail straight to (x, y) at ``knots`` (default: a transit speed), heading
        along course (+-2 degrees of noise); the last row is at (x, y)."""
        knots = float(self.rng.uniform(*TRANSIT_KN)) if knots is None else knots
        x0, y0 = self.pos
        dist = math.hypot(x - x0, y - y0)
        if dist < 1e-9:
            return
        n = max(1, math.ceil(dist / self.step_km(knots)))
        f = np.minimum(1.0, np.arange(1, n + 1) * self.step_km(knots) / dist)
        course = bearing(x - x0, y - y0)
        heading = (course + self.rng.normal(0, 2.0, n)) % 360.0
        self.add(x0 + f * (x - x0), y0 + f * (y - y0), round(knots, 1), round(course, 1), np.round(heading, 1))

    def lane_point(self, near: float = 30.0) -> tuple[float, float]:
        """A point of the open-sea lanes within about ``near`` km of the vessel."""
        x0, y0 = self.pos
        x = float(np.clip(x0 + self.rng.uniform(-near, near), 5.0, WIDTH_KM - 5.0))
        y = float(np.clip(y0 + self.rng.uniform(-near, near), *LANE_Y_KM))
        return x, y

    def open_sea_spot(self) -> tuple[float, float]:
        """A lane point at least 3 km outside every fishing ground."""
        for _ in range(50):
            x, y = self.lane_point(15.0)
            if not in_fishing(np.array([x]), np.array([y]), margin=-3.0)[0]:
                return x, y
        return 5.0 + float(self.rng.uniform(0, 2)), LANE_Y_KM[1]  # the far north-west corner: no ground


def _n(track: Track, lo: int = 3, hi: int = 10) -> int:
    return int(track.rng.integers(lo, hi + 1))


def plant_hsnc(track: Track, decoy: bool = False) -> list[Truth]:
    """T Def. 5.10: along the coast, within 300 m (decoy: 450-900 m), faster than 5 knots,
    midway between two ports (so the run-in is never a port approach)."""
    rng = track.rng
    k = int(np.clip(np.floor((track.pos[0] - PORT_X[0]) / 20.0), 0, len(PORT_X) - 2))
    xm = float(PORT_X[k] + 10.0)
    track.sail(xm, LANE_Y_KM[0])
    track.sail(xm, 1.2)
    n, kn = _n(track, 1, 8), float(rng.uniform(6.0, 14.0))
    sign = 1.0 if rng.random() < 0.5 else -1.0
    xs = xm + sign * track.step_km(kn) * np.arange(n)
    ys = rng.uniform(0.45, 0.9, n) if decoy else rng.uniform(0.16, 0.26, n)
    course = 90.0 if sign > 0 else 270.0
    first = len(track)
    track.add(xs, ys, round(kn, 1), course, np.round(course + rng.normal(0, 1.5, n), 1) % 360)
    last = len(track) - 1
    track.sail(float(xs[-1]), 1.2, 14.0)
    track.sail(float(xs[-1]), LANE_Y_KM[0])
    return [] if decoy else [("hsnc", first, last)]


def _approach(track: Track, y_end: float) -> list[Truth]:
    """Descend straight onto the nearest port from the lanes down to ``y_end`` km off it;
    the approach truth is read from the emitted distances (T Def. 5.16)."""
    rng = track.rng
    idx, _ = port_distances(np.array([track.pos[0]]), np.array([0.0]))
    x = float(PORT_X[idx[0]] + rng.uniform(-2.0, 2.0))
    track.sail(x, LANE_Y_KM[0])
    first = len(track)
    track.sail(x, y_end, float(rng.uniform(6.0, 12.0)))
    ys = track.column("y")[first:]
    d = np.round(np.hypot(x - PORT_X[idx[0]], ys), 4)
    b = np.flatnonzero((d > 5.0) & (d < 7.0))
    c = np.flatnonzero(d < 5.0)
    if len(b) == 0 or len(c) == 0 or b[0] == 0 or not 7.0 < d[b[0] - 1] < 10.0:
        return []
    return [("approach", first + int(b[0]) - 1, first + int(c[0]))]


def plant_approach(track: Track, decoy: bool = False) -> list[Truth]:
    """T Def. 5.16: from beyond 7 km through 5-7 km to inside 5 km of a port (decoy:
    turns back between 5 and 7 km), then back to the lanes."""
    truth = _approach(track, float(track.rng.uniform(5.4, 6.5) if decoy else track.rng.uniform(2.5, 4.5)))
    track.sail(track.pos[0], LANE_Y_KM[0])
    return truth


def plant_anchored(track: Track, decoy: bool = False) -> list[Truth]:
    """T Def. 5.11: approach a port (an approach, recorded too), then lie still (under
    0.5 knots) for three or more rows (decoy: two) within its 5 km, then leave."""
    rng = track.rng
    truth = _approach(track, float(rng.uniform(2.5, 4.5)))
    n = 2 if decoy else _n(track)
    x0, y0 = track.pos
    first = len(track)
    head = float(rng.uniform(0, 360))
    track.add(x0 + rng.normal(0, 0.01, n), y0 + rng.normal(0, 0.01, n), np.round(rng.uniform(0, 0.4, n), 1),
              np.round(rng.uniform(0, 360, n), 1), np.round(head + rng.normal(0, 8, n), 1) % 360, 1)
    last = len(track) - 1
    track.sail(track.pos[0], LANE_Y_KM[0])
    return truth + ([] if decoy else [("anchored", first, last)])


def plant_drifting(track: Track, decoy: bool = False) -> list[Truth]:
    """T Def. 5.12: heading more than 30 degrees off course (decoy: 12-22) at 0.8-3
    knots, for three or more rows, in open sea outside fishing grounds."""
    rng = track.rng
    track.sail(*track.open_sea_spot())
    n, kn = _n(track), float(rng.uniform(0.8, 3.0))
    course = float(rng.uniform(0, 360))
    off = float(rng.uniform(12, 22) if decoy else rng.uniform(45, 120)) * (1 if rng.random() < 0.5 else -1)
    step = track.step_km(kn) * np.arange(1, n + 1)
    x0, y0 = track.pos
    first = len(track)
    track.add(x0 + step * math.sin(math.radians(course)), y0 + step * math.cos(math.radians(course)), round(kn, 1),
              round(course, 1), np.round(course + off + rng.normal(0, 2, n), 1) % 360, 3)
    last = len(track) - 1
    track.sail(*track.lane_point())
    return [] if decoy else [("drifting", first, last)]


def plant_trawling(track: Track, decoy: bool = False) -> list[Truth]:
    """T Def. 5.13: a fishing vessel at 2.5-5 knots (decoy: 9.3-10) inside a fishing
    ground for three or more rows."""
    from moirae.sources.maritime_geo import FISHING

    rng = track.rng
    cx, cy, r = min(FISHING, key=lambda c: math.hypot(c[0] - track.pos[0], c[1] - track.pos[1]))
    a, rr = float(rng.uniform(0, 2 * math.pi)), float(rng.uniform(0, r - 4.0))
    track.sail(cx + rr * math.cos(a), cy + rr * math.sin(a))
    n, kn = _n(track), float(rng.uniform(9.3, 10.0) if decoy else rng.uniform(2.5, 5.0))
    course = (float(rng.uniform(0, 360)) + np.cumsum(rng.normal(0, 3, n))) % 360
    step = track.step_km(kn)
    x0, y0 = track.pos
    xs = x0 + np.cumsum(step * np.sin(np.radians(course)))
    ys = y0 + np.cumsum(step * np.cos(np.radians(course)))
    first = len(track)
    track.add(xs, ys, round(kn, 1), np.round(course, 1), np.round(course + rng.normal(0, 2, n), 1) % 360, 2)
    last = len(track) - 1
    track.sail(*track.lane_point())
    return [] if decoy else [("trawling", first, last)]


def plant_sar(track: Track, decoy: bool = False) -> list[Truth]:
    """T Def. 5.14: a SAR vessel above 2.7 knots changing its heading by 25-60 degrees
    (decoy: 6-12) at every row, three or more rows; its last heading points where it
    sails next, so the change stops exactly with the episode."""
    rng = track.rng
    target = track.lane_point(40.0)
    for _ in range(20):
        if math.hypot(target[0] - track.pos[0], target[1] - track.pos[1]) >= 30.0:
            break
        target = track.lane_point(40.0)
    else:
        target = (5.0 if track.pos[0] > WIDTH_KM / 2 else WIDTH_KM - 5.0, track.pos[1])
    n, kn = _n(track), float(rng.uniform(4.0, 8.0))
    lo, hi = (6.0, 12.0) if decoy else (25.0, 60.0)
    heads = np.zeros(n)
    heads[-1] = bearing(target[0] - track.pos[0], target[1] - track.pos[1])
    for i in range(n - 2, -1, -1):
        heads[i] = heads[i + 1] + rng.uniform(lo, hi) * (1 if rng.random() < 0.5 else -1)
    if not decoy and angle_diff(heads[0], track.last_heading) < lo:  # the first row must change too:
        heads[0] = 2 * heads[1] - heads[0]  # the mirror turn is at least `lo` away (2 * lo apart)
    heads %= 360
    step = track.step_km(kn)
    x0, y0 = track.pos
    xs = x0 + np.cumsum(step * np.sin(np.radians(heads)))
    ys = y0 + np.cumsum(step * np.cos(np.radians(heads)))
    first = len(track)
    track.add(xs, ys, round(kn, 1), np.round(heads + rng.normal(0, 2, n), 1) % 360, np.round(heads, 1), 3)
    last = len(track) - 1
    track.sail(*target)
    return [] if decoy else [("sar", first, last)]


def plant_loitering(track: Track, decoy: bool = False) -> list[Truth]:
    """T Def. 5.15: under 0.5 knots far from ports and the coast, three or more rows
    (decoy: two)."""
    rng = track.rng
    track.sail(*track.lane_point(10.0))
    n = 2 if decoy else _n(track)
    x0, y0 = track.pos
    first = len(track)
    track.add(x0 + rng.normal(0, 0.01, n), y0 + rng.normal(0, 0.01, n), np.round(rng.uniform(0, 0.4, n), 1),
              np.round(rng.uniform(0, 360, n), 1), np.round(rng.uniform(0, 360, n), 1))
    last = len(track) - 1
    track.sail(*track.lane_point())
    return [] if decoy else [("loitering", first, last)]


PLANTERS = {"hsnc": plant_hsnc, "anchored": plant_anchored, "drifting": plant_drifting,
            "trawling": plant_trawling, "sar": plant_sar, "loitering": plant_loitering,
            "approach": plant_approach}
