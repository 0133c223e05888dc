"""The ``maritime`` scenario: seeded AIS-like vessel traffic with planted behaviours.

It stands in for the paper's Brest data set (T 5.2.1) in the coastal area of
:mod:`moirae.sources.maritime_geo`. Each vessel reports every ``period_s`` seconds one
row of :data:`COLUMNS`: ``vessel_id``, ``ts``, ``lon``, ``lat``, ``speed`` (knots over
ground), ``course`` (over ground), ``heading``, ``status`` (AIS navigational status),
``ship_type``, and the columns the patterns read, computed per row: distances to the
coast and the nearest port (and its name), ``near_coast``, ``near_port``,
``in_anchorage``, ``in_fishing``, ``in_protected``, ``heading_diff`` (heading vs course,
T Def. 5.12) and ``heading_change`` (vs the vessel's previous row, T Def. 5.14).

Vessels sail the open-sea lanes at transit speed and, slot after slot, plant one of the
behaviours of T Defs. 5.10-5.16 (:mod:`moirae.sources.maritime_track`): high speed near
the coast, anchored, drifting, trawling (fishing vessels), search and rescue (SAR
vessels), loitering, approaching a port; or a near miss of one (a decoy), or nothing.
Every planted behaviour is recorded in :meth:`MaritimeScenario.truth` as (vessel,
behaviour, start, end): the timestamps of its first and last row. A slot that would not
end 15 minutes before the last row is replaced by plain transit, so no behaviour is cut
short and a live watermark (lateness under 15 minutes) passes every behaviour's end.

Everything is a pure function of (config, vessel): vessel ``i`` draws from
``default_rng([seed, i])``, so the same config gives the same rows, whatever the order.
:meth:`MaritimeScenario.chunks` yields the rows in event-time order, a time span at a
time (the wide columns are built per span); :meth:`MaritimeScenario.write` writes them
as CSV or Parquet (for other engines, and for the ``maritime`` source kind's replay).

>>> g = MaritimeScenario(MaritimeConfig(vessels=3, hours=1.0))
>>> f = g.frame()
>>> len(f), list(f.columns[:4]), bool(f["ts"].is_monotonic_increasing)
(360, ['vessel_id', 'ts', 'lon', 'lat'], True)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from moirae.sources.errors import ScenarioConfigError
from moirae.sources.maritime_geo import LANE_Y_KM, WIDTH_KM, angle_diff, geo_columns
from moirae.sources.maritime_track import BEHAVIOURS, PLANTERS, STATUS, Track

COLUMNS = ("vessel_id", "ts", "lon", "lat", "speed", "course", "heading", "status", "ship_type",
           "dist_coast_km", "dist_port_km", "nearest_port", "near_coast", "near_port", "in_anchorage",
           "in_fishing", "in_protected", "heading_diff", "heading_change")
#: the Spark DDL of a row
SCHEMA_DDL = ("vessel_id string, ts timestamp, lon double, lat double, speed double, course double, "
              "heading double, status string, ship_type string, dist_coast_km double, dist_port_km double, "
              "nearest_port string, near_coast boolean, near_port boolean, in_anchorage boolean, "
              "in_fishing boolean, in_protected boolean, heading_diff double, heading_change double")
SHIP_TYPES = ("cargo", "tanker", "passenger", "fishing", "sar", "pleasure")
_SHIP_P = (0.26, 0.14, 0.1, 0.28, 0.08, 0.14)
#: which behaviours each ship type plants, and how often (the rest of a slot is transit)
_PLAN = {
    "fishing": {"trawling": 4, "loitering": 1, "drifting": 1, "hsnc": 1, "approach": 1, "anchored": 1, None: 1},
    "sar": {"sar": 5, "approach": 1, None: 2},
}
_OTHER = {"hsnc": 2, "anchored": 2, "drifting": 2, "loitering": 2, "approach": 2, None: 2}
_NS = 1_000_000_000


@dataclass(frozen=True)
class MaritimeConfig:
    """The scenario's size and shape. ``start``: ISO 8601 with a zone; ``decoy_rate``:
    the share of planted episodes that are near misses instead."""

    seed: int = 7
    vessels: int = 20
    hours: float = 6.0
    period_s: float = 30.0
    start: str = "2026-01-05T00:00:00Z"
    decoy_rate: float = 0.25

    def __post_init__(self) -> None:
        for key in ("vessels", "hours", "period_s"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise ScenarioConfigError(f"maritime option {key!r} must be a positive number, got {v!r}")
        if not 0 <= self.decoy_rate <= 1:
            raise ScenarioConfigError(f"maritime option 'decoy_rate' must be within 0-1, got {self.decoy_rate!r}")
        try:
            ts = dt.datetime.fromisoformat(self.start.replace("Z", "+00:00"))
        except (ValueError, AttributeError):
            raise ScenarioConfigError(f"maritime option 'start' must be an ISO 8601 time, got {self.start!r}") from None
        if ts.tzinfo is None:
            raise ScenarioConfigError(f"maritime option 'start' must carry a time zone, got {self.start!r}")

    @property
    def start_ns(self) -> int:
        ts = dt.datetime.fromisoformat(self.start.replace("Z", "+00:00"))
        return int(ts.timestamp()) * _NS + ts.microsecond * 1000

    @property
    def rows_per_vessel(self) -> int:
        return int(self.hours * 3600 // self.period_s)


@dataclass(frozen=True)
class Vessel:
    """One vessel's rendered track (plane columns) and its planted ground truth."""

    vessel_id: str
    ship_type: str
    t0_ns: int
    cols: dict[str, np.ndarray]
    truth: tuple[tuple[str, int, int], ...]
    decoys: tuple[tuple[str, int, int], ...]


class MaritimeScenario:
    """Deterministic generator of the maritime rows (see the module docstring)."""

    def __init__(self, config: MaritimeConfig) -> None:
        self.config = config
        self._vessels: list[Vessel] | None = None

    def vessel(self, i: int) -> Vessel:
        """Vessel ``i`` (0-based), rendered from its own seed."""
        cfg = self.config
        rng = np.random.default_rng([cfg.seed, i])
        ship = str(rng.choice(SHIP_TYPES, p=_SHIP_P))
        plan = _PLAN.get(ship, _OTHER)
        kinds, weights = list(plan), np.array(list(plan.values()), float)
        t0 = cfg.start_ns + int(rng.uniform(0, cfg.period_s) * 1000) * 1_000_000  # AIS times: ms
        track = Track(rng, cfg.period_s, float(rng.uniform(5, WIDTH_KM - 5)), float(rng.uniform(*LANE_Y_KM)))
        n = cfg.rows_per_vessel
        truth: list[tuple[str, int, int]] = []
        decoys: list[tuple[str, int, int]] = []
        track.sail(*track.lane_point())  # a transit first: every behaviour has a row before it
        tail = max(3, int(900 // cfg.period_s))  # the last 15 minutes: transit (a live watermark passes them)
        while len(track) < n:
            kind = kinds[int(rng.choice(len(kinds), p=weights / weights.sum()))]
            decoy = bool(rng.random() < cfg.decoy_rate)
            before = len(track)
            if kind is None:
                track.sail(*track.lane_point())
                continue
            planted = PLANTERS[kind](track, decoy=decoy)
            if len(track) >= n - tail:  # cut short: the rows past `before` become plain transit
                track = _truncate(track, before)
                while len(track) < n:
                    track.sail(*track.lane_point())
                break
            if decoy:
                decoys.append((kind, before, len(track) - 1))
            truth.extend(planted)
        cols = {k: track.column(k)[:n] for k in ("x", "y", "speed", "course", "heading", "status")}
        return Vessel(f"V{i:05d}", ship, t0, cols, tuple(truth), tuple(decoys))

    def vessels(self) -> list[Vessel]:
        if self._vessels is None:
            self._vessels = [self.vessel(i) for i in range(self.config.vessels)]
        return self._vessels

    def truth(self) -> pd.DataFrame:
        """The planted behaviours: ``vessel_id, behaviour, start, end`` (first and last
        row's ``ts``), ordered by start."""
        recs = []
        p = int(self.config.period_s * _NS)
        for v in self.vessels():
            for kind, a, b in v.truth:
                recs.append((v.vessel_id, kind, v.t0_ns + a * p, v.t0_ns + b * p))
        df = pd.DataFrame(recs, columns=["vessel_id", "behaviour", "start", "end"])
        for c in ("start", "end"):
            df[c] = pd.to_datetime(df[c].astype("int64"), utc=True)
        return df.sort_values(["start", "vessel_id"], kind="stable").reset_index(drop=True)

    def decoys(self) -> pd.DataFrame:
        """The near misses (which must match nothing): ``vessel_id, behaviour, start, end``."""
        p = int(self.config.period_s * _NS)
        recs = [(v.vessel_id, k, v.t0_ns + a * p, v.t0_ns + b * p) for v in self.vessels() for k, a, b in v.decoys]
        df = pd.DataFrame(recs, columns=["vessel_id", "behaviour", "start", "end"])
        for c in ("start", "end"):
            df[c] = pd.to_datetime(df[c].astype("int64"), utc=True)
        return df

    def chunks(self, span_s: float = 3600.0) -> Iterator[pd.DataFrame]:
        """The rows of every vessel in event-time order, one frame per ``span_s`` seconds."""
        cfg = self.config
        vs = self.vessels()
        p = int(cfg.period_s * _NS)
        n = cfg.rows_per_vessel
        span = int(span_s * _NS)
        end = cfg.start_ns + n * p + p
        for a in range(cfg.start_ns, end, span):
            parts = []
            for v in vs:
                lo = max(0, -(-(a - v.t0_ns) // p))
                hi = min(n, max(0, -(-(a + span - v.t0_ns) // p)))
                if hi > lo:
                    parts.append(_slice(v, lo, hi, p))
            if parts:
                yield _frame(parts)

    def frame(self) -> pd.DataFrame:
        """All rows in one frame (small sizes)."""
        parts = list(self.chunks(max(3600.0, self.config.hours * 3600 + 60)))
        return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)

    def write(self, path: str | Path, header: bool = True, span_s: float = 3600.0) -> int:
        """Write the rows to ``path`` (``.parquet`` or CSV), a span at a time; returns the
        row count. CSV timestamps are ``yyyy-MM-dd HH:mm:ss.SSS`` (UTC), booleans
        ``true``/``false``, as SQL engines read them."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = 0
        if path.suffix in (".parquet", ".pq"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            writer = None
            try:
                for df in self.chunks(span_s):
                    table = pa.Table.from_pandas(df, preserve_index=False)
                    writer = writer or pq.ParquetWriter(str(path), table.schema)
                    writer.write_table(table)
                    rows += len(df)
            finally:
                if writer is not None:
                    writer.close()
            return rows
        import pyarrow as pa
        import pyarrow.csv as pcsv

        writer = None
        try:
            for df in self.chunks(span_s):
                out = df.copy()
                out["ts"] = np.char.replace(np.datetime_as_string(
                    out["ts"].dt.tz_convert(None).to_numpy(dtype="datetime64[ms]"), unit="ms"), "T", " ")
                table = pa.Table.from_pandas(out, preserve_index=False)
                if writer is None:
                    writer = pcsv.CSVWriter(str(path), table.schema,
                                            write_options=pcsv.WriteOptions(include_header=header, quoting_style="none"))
                writer.write_table(table)
                rows += len(df)
        finally:
            if writer is not None:
                writer.close()
        return rows


def _truncate(track: Track, n: int) -> Track:
    """A copy of ``track`` with only its first ``n`` rows (state at its last row)."""
    out = Track(track.rng, track.period_s, *track.pos)
    cols = {k: track.column(k)[:n] for k in ("x", "y", "speed", "course", "heading", "status")}
    out.add(cols["x"], cols["y"], cols["speed"], cols["course"], cols["heading"])
    out._cols["status"] = [cols["status"].astype(np.int8)]
    return out


def _slice(v: Vessel, lo: int, hi: int, period_ns: int) -> dict[str, np.ndarray]:
    """Rows ``lo:hi`` of vessel ``v``: its plane columns, times and previous headings."""
    c = {k: a[lo:hi] for k, a in v.cols.items()}
    head = v.cols["heading"]
    c["prev"] = head[lo - 1: hi - 1] if lo > 0 else np.concatenate([head[:1], head[: hi - 1]])
    c["ts"] = v.t0_ns + np.arange(lo, hi, dtype=np.int64) * period_ns
    c["vessel_id"] = np.full(hi - lo, v.vessel_id, dtype=object)
    c["ship_type"] = np.full(hi - lo, v.ship_type, dtype=object)
    return c


def _frame(parts: list[dict[str, np.ndarray]]) -> pd.DataFrame:
    """One frame of :data:`COLUMNS` from vessel slices, ordered by (ts, vessel_id)."""
    c = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.lexsort((c["vessel_id"], c["ts"]))
    c = {k: a[order] for k, a in c.items()}
    g = geo_columns(c["x"], c["y"])
    return pd.DataFrame({
        "vessel_id": c["vessel_id"],
        "ts": pd.to_datetime(c["ts"], utc=True),
        "lon": g["lon"], "lat": g["lat"],
        "speed": c["speed"], "course": c["course"], "heading": c["heading"],
        "status": np.asarray(STATUS, dtype=object)[c["status"].astype(int)],
        "ship_type": c["ship_type"],
        "dist_coast_km": g["dist_coast_km"], "dist_port_km": g["dist_port_km"], "nearest_port": g["nearest_port"],
        "near_coast": g["near_coast"], "near_port": g["near_port"], "in_anchorage": g["in_anchorage"],
        "in_fishing": g["in_fishing"], "in_protected": g["in_protected"],
        "heading_diff": np.round(angle_diff(c["heading"], c["course"]), 1),
        "heading_change": np.round(angle_diff(c["heading"], c["prev"]), 1),
    })


__all__ = ["BEHAVIOURS", "COLUMNS", "SCHEMA_DDL", "MaritimeConfig", "MaritimeScenario", "Vessel"]
