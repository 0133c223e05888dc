"""The output provenance read straight off a key's provenance table
(moirae/patterns/spark_buffer.py:ProvTable.columns) is what the row-by-row lookup gives
(:meth:`ProvTable.lookup`, then each bound row's entry, a row the table lacks being its own
source without a time): in every form the table takes (shorthands, offsets), with a row id
given twice (its last entry) and with row ids the table lacks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moirae.patterns.spark_buffer import ProvTable
from moirae.patterns.spark_core import _typed

T0 = 1_704_067_200_000_000_000


def _by_lookup(table: ProvTable, rows: list[list]) -> tuple[list, list]:
    prov = table.lookup({r for rs in rows for r in rs})
    ids = [[int(i) for r in rs for i in prov.get(r, ((r,), ()))[0]] for rs in rows]
    us = [[int(t) // 1000 for r in rs for t in prov.get(r, ((r,), ()))[1]] for rs in rows]
    return ids, us


def _tables() -> dict[str, ProvTable]:
    rid = np.array([5, 6, 7, 8, 6], dtype=np.int64)  # row 6 twice: its last entry counts
    t = T0 + np.arange(5, dtype=np.int64) * 1_000_000_007
    return {
        "own source": ProvTable.of_single(rid, t, None, None),
        "source ids": ProvTable.of_single(rid, t, rid + 100, None),
        "source times": ProvTable.of_single(rid, t, None, t // 1000 - 3),
        "null times": ProvTable.of_single(rid, t, rid + 100, np.array([1.0, np.nan, 3.0, np.nan, 5.0])),
        "several sources": ProvTable.of(rid, t, [[1], [2, 3], [], [4], [5, 6]],
                                        [[pd.Timestamp(T0, tz="UTC")], [pd.Timestamp(T0 + 1500, tz="UTC")] * 2,
                                         [], [pd.Timestamp(T0 - 7, tz="UTC")], [None, None]]),
        "extended": ProvTable.of_single(rid[:2], t[:2], None, None).extend(
            ProvTable.of_single(rid[2:], t[2:], rid[2:] + 9, t[2:] // 1000)),
    }


@pytest.mark.parametrize("form", sorted(_tables()))
@pytest.mark.parametrize("rows", [[[5, 6, 7]], [[6], [8, 5]], [[7, 99], [99]], [], [[]]])
def test_columns_are_the_lookup_of_each_bound_row(form, rows):
    table = _tables()[form]
    assert table.columns(rows) == _by_lookup(table, rows)


def test_a_row_id_given_twice_reads_as_its_last_entry():
    table = _tables()["source ids"]
    assert table.columns([[6]]) == ([[106]], [[(T0 + 4 * 1_000_000_007) // 1000]])


@pytest.mark.parametrize("values", [[1, 2], [1.5, float("nan")], [1, 2.5], [1, None], [True, False], [2**63, 1],
                                    ["a"], [None], [], [np.int64(3)], [1.0, 2]])
def test_typed_measures_are_the_constructors(values):
    pd.testing.assert_frame_equal(pd.DataFrame({"m": _typed(list(values))}), pd.DataFrame({"m": list(values)}))
