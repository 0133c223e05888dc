"""The pattern's stateful processor (moirae/patterns/spark_processor.py) driven as Spark
drives it, without a JVM: per micro-batch, each key's new rows, then the key's event-time
timers the watermark passed. Over hypothesis-free seeded streams whose rows arrive out
of order (within the lateness), cut into batches anyhow and with the processor rebuilt
from its saved state bytes between batches (a restart), the matches are the reference
matcher's, each once, with its bound rows as provenance."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from moirae.patterns import compile_pattern, reference_matches
from moirae.patterns.spark_buffer import BUFFER_VERSION, KeyBuffer, ProvTable, _pack, _pack_cols
from moirae.patterns.spark_processor import IN_ID, IN_IDS, IN_TS, IN_TUS, PatternCore, processor
from moirae.patterns.spark_schema import PROV_IDS, PROV_TS, ROW_ID
from moirae.patterns.state import STATE_VERSION
from tests.patterns.processor_driver import drive, seeded_stream

PATTERNS = {
    "greedy": """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(A.*) AS n
        PATTERN (A{2,} B) WITHIN INTERVAL '25' SECOND DEFINE A AS x > 4, B AS x <= 4 AND x < LAST(A.x))""",
    "skip_till_any": """SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES COUNT(A.*) AS n
        PATTERN (SKIP_TILL_ANY(A, B, C)) WITHIN INTERVAL '20' SECOND
        DEFINE A AS x = 1, B AS x = 2, C AS x = 3)""",
}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("which", sorted(PATTERNS))
def test_batched_out_of_order_and_restarted_equals_the_reference(which, seed):
    cp = compile_pattern(PATTERNS[which], name="p", columns={"k": "string", "x": "double", "ts": "timestamp"},
                         row_id=ROW_ID)
    core = PatternCore(cp, "eid", "ts", ("n",))
    rows, batches = seeded_stream(seed)
    got, saved = drive(lambda: processor(core), rows, batches, check_late=True)
    ref = reference_matches(cp, rows)
    assert ref, "the stream should match"
    assert got["eid"].is_unique
    want = sorted((m.key[0], pd.Timestamp(m.last_ts), m.measures["n"], tuple(1000 + r for r, _ in m.rows))
                  for m in ref)
    have = sorted((r["k"], r["ts"], r["n"], tuple(r[PROV_IDS])) for r in got.to_dict("records"))
    assert have == want
    assert all(s.value is None for s, _ in saved.values()), "an idle key keeps state past WITHIN"


def test_the_provenance_is_the_same_whichever_form_the_input_carries_it_in():
    """Lists of source ids and times, one id and one time in microseconds, or nothing (an
    uninstrumented input: each row its own source tuple) give the same matches, with the
    same provenance; a MEASURE of the event time reads it off the rows' times."""
    sql = PATTERNS["greedy"].replace("COUNT(A.*) AS n", "COUNT(A.*) AS n, FIRST(A.ts) AS since")
    cp = compile_pattern(sql, name="p", columns={"k": "string", "x": "double", "ts": "timestamp"}, row_id=ROW_ID)
    rows, batches = seeded_stream(3)
    us = rows["ts"].astype("int64") // 1000

    def scalar(f: pd.DataFrame) -> pd.DataFrame:
        return f.drop(columns=[IN_IDS, IN_TS]).assign(**{IN_ID: 1000 + f[ROW_ID], IN_TUS: us[f.index]})

    def bare(f: pd.DataFrame) -> pd.DataFrame:
        return f.drop(columns=[IN_IDS, IN_TS])

    out = {}
    for form, fix in (("lists", lambda f: f), ("scalar", scalar), ("bare", bare)):
        core = PatternCore(cp, "eid", "ts", ("n", "since"))
        got, _ = drive(lambda core=core: processor(core), fix(rows), [fix(b) for b in batches], check_late=True)
        out[form] = sorted((r["eid"], r["since"], tuple(r[PROV_IDS]), tuple(r[PROV_TS])) for r in got.to_dict("records"))
    ref = reference_matches(cp, rows)
    want = sorted((m.measures["since"], tuple(1000 + r for r, _ in m.rows)) for m in ref)
    assert want and sorted((s, p) for _, s, p, _ in out["lists"]) == want
    assert out["scalar"] == out["lists"]
    assert [(e, s, tuple(i - 1000 for i in p), t) for e, s, p, t in out["lists"]] == out["bare"]
    ts_us = dict(zip(rows[ROW_ID], us, strict=True))
    assert all(t == tuple(ts_us[i] for i in p) for _, _, p, t in out["bare"])


def _as_version(data: bytes, version: int) -> bytes:
    """A key's saved value re-written as an older version of the buffer wrote it: before
    version 6 every row had an entry in the provenance table (now a row that is its own
    source tuple has none: its id and time are the waiting rows' and the matcher states');
    version 5 saved numeric arrays as raw bytes, version 4 pickled numpy arrays and the
    provenance table as they are; version 3 also kept the key's columns among the waiting
    rows and no shorthand in the provenance table."""
    kb = KeyBuffer.from_bytes(data)
    pending, prov = kb.pending, kb.prov
    if kb.own_t is not None:  # the rows that are their own source: entries of the table, before its own
        held = [(m.buf["__rid"], m.buf["__ts"]) for m in kb.matchers if m is not None and m.buf]
        if pending is not None:
            held.append((pending[ROW_ID], pending["ts"]))
        own = ProvTable.of_single(np.concatenate([h[0] for h in held]), np.concatenate([h[1] for h in held]),
                                  None, None)
        prov = own if prov is None else own.extend(prov)
    if version == 3:
        if pending is not None:
            n = len(pending[ROW_ID])
            pending = {"k": np.array([kb.key[0]] * n, dtype=object), **pending}
        if prov is not None:
            ones = np.arange(len(prov) + 1, dtype=np.int64)
            prov = ProvTable(prov.rid, prov.t, prov._ids(), prov.ids_off if prov.ids_off is not None else ones,
                             prov._pts(), prov.pts_off if prov.pts_off is not None else ones)
    if version == 5:
        sts = tuple(None if m is None else {**m.__dict__, "buf": _pack_cols(m.buf)} for m in kb.matchers)
        packed = None if prov is None else tuple(_pack(a) for a in (prov.rid, prov.t, prov.ids, prov.ids_off,
                                                                     prov.pts, prov.pts_off))
        return pickle.dumps((5, kb.key, _pack_cols(pending), STATE_VERSION, sts, kb.fed_ns, packed, kb.timer))
    sts = tuple(None if m is None else m.__dict__ for m in kb.matchers)
    return pickle.dumps((version, kb.key, pending, STATE_VERSION, sts, kb.fed_ns, prov, kb.timer))


@pytest.mark.parametrize("form", ["lists", "own"])
@pytest.mark.parametrize("version", [3, 4, 5])
def test_a_state_saved_by_an_older_version_restores(version, form):
    """Every step reads its key's state as an older version wrote it (a checkpoint taken
    before an upgrade): the matches and their provenance are those of the current version,
    whether the rows carry their provenance (lists) or are their own source tuples."""
    cp = compile_pattern(PATTERNS["greedy"], name="p", columns={"k": "string", "x": "double", "ts": "timestamp"},
                         row_id=ROW_ID)
    rows, batches = seeded_stream(4)
    if form == "own":
        rows, batches = rows.drop(columns=[IN_IDS, IN_TS]), [b.drop(columns=[IN_IDS, IN_TS]) for b in batches]

    def older():
        p = processor(PatternCore(cp, "eid", "ts", ("n",)))
        init = p.init

        def init_older(handle):
            saved = handle.state.value
            if saved is not None and pickle.loads(saved[0])[0] == BUFFER_VERSION:  # written since
                handle.state.value = (_as_version(saved[0], version),)
            init(handle)

        p.init = init_older
        return p

    def records(got: pd.DataFrame) -> list:
        return sorted((r["eid"], r["n"], tuple(r[PROV_IDS]), tuple(r[PROV_TS])) for r in got.to_dict("records"))

    now, _ = drive(lambda: processor(PatternCore(cp, "eid", "ts", ("n",))), rows, batches, check_late=True)
    old, saved = drive(older, rows, batches, check_late=True)
    assert len(now) and records(old) == records(now)
    assert all(s.value is None for s, _ in saved.values())
