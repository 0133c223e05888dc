"""Malformed rows at 1 % of a live stream: micro-batches arrive through the
archive sink's write path (Arrow batches with their batch ids); 1 % of the rows are
malformed: a value of the wrong type, a NaN or missing event time, a NUL character, an
oversized string. Every malformed row is dead-lettered with a reason naming its column,
every other row is archived, once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from archive.archiver import Archiver
from archive.settings import ArchiveSettings
from archive.streams import StreamSpec
from archive.validate import MAX_TEXT_CHARS
from tests.faults.fault_helpers import measuring

pytestmark = [pytest.mark.faults, pytest.mark.postgres]
T0 = datetime(2024, 3, 1, tzinfo=UTC)
BATCHES, ROWS = 20, 500
KINDS = ["wrong_type", "nan_time", "nul", "oversized"]


def _batch(i: int, rng) -> tuple[pa.Table, list[tuple[int, str]]]:
    ts = [(T0 + timedelta(seconds=i * ROWS + j)).isoformat() for j in range(ROWS)]
    bw = [str(round(v, 3)) for v in rng.normal(50, 10, ROWS)]
    sid = [f"s{j % 5}" for j in range(ROWS)]
    bad = []
    for j in rng.choice(ROWS, size=ROWS // 100, replace=False).tolist():  # 1 %
        kind = KINDS[(i + j) % len(KINDS)]
        if kind == "wrong_type":
            bw[j] = "twelve"
        elif kind == "nan_time":
            ts[j] = "NaN" if j % 2 else None
        elif kind == "nul":
            sid[j] = "s\x00evil"
        else:
            sid[j] = "x" * (MAX_TEXT_CHARS + 1)
        bad.append((j, kind))
    # strings, as a CSV or JSON source delivers them: the archive coerces and validates
    return pa.table({"ts": pa.array(ts, pa.string()), "sid": sid, "bw": bw}), bad


def test_malformed_rows_are_dead_lettered(pg):
    arch = Archiver(pg, ArchiveSettings(chunk_span=timedelta(minutes=30)))
    try:
        with measuring("malformed", enabled=not pg.dsn.startswith("host=127.0.0.1")) as figures:
            _dead_letter_run(pg, arch, figures)
    finally:
        arch.close()


def _dead_letter_run(pg, arch: Archiver, figures: dict) -> None:
    """Stream the batches, fill ``figures`` with what was archived and dead-lettered, then
    assert on them."""
    arch.register_stream(StreamSpec.build("metrics", "ts", {"sid": "text", "bw": "double"}))
    rng = np.random.default_rng(12)
    malformed = 0
    kinds: dict[str, int] = dict.fromkeys(KINDS, 0)
    miscounted = []  # (batch, dead letters reported, malformed rows sent)
    for i in range(BATCHES):
        table, bad = _batch(i, rng)
        res = arch.append("metrics", i, table)
        if res.dead_letters != len(bad):
            miscounted.append((i, res, bad))
        malformed += len(bad)
        for _, k in bad:
            kinds[k] += 1
    good = BATCHES * ROWS - malformed
    with pg.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*), count(DISTINCT _sid) FROM metrics")
        archived, distinct = cur.fetchone()
        cur.execute("SELECT reason FROM moirae_dead_letters WHERE stream = 'metrics'")
        reasons = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT count(*) FROM metrics WHERE sid LIKE 'x%%' OR bw IS NULL")
        leaked = cur.fetchone()[0]
    status_dead = arch.status()["streams"]["metrics"]["dead_letters"]
    named = [r for r in reasons if ("column 'ts'" in r) or ("column 'sid'" in r) or ("column 'bw'" in r)]
    figures.update(rows=BATCHES * ROWS, malformed=malformed, by_kind=kinds,
                   dead_lettered=len(reasons), dead_lettered_pct=round(100.0 * len(reasons) / malformed, 2),
                   with_reason=len(named), good=good, archived=int(archived), archived_distinct=int(distinct),
                   leaked=int(leaked), batches_miscounted=len(miscounted))
    assert not miscounted, miscounted[0]
    assert archived == distinct == good and leaked == 0
    assert len(reasons) == malformed and len(named) == len(reasons), reasons[:5]
    assert all(len(r) < 400 for r in reasons), "a reason names the value, it does not copy it"
    assert status_dead == malformed
