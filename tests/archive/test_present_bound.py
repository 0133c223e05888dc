"""The present tier's in-memory mirror stays within ``present_cache_rows``: a chunk's copy
that would grow past it is dropped and read from PostgreSQL from then on (the
present tier stays bounded in a long run)."""

from __future__ import annotations

import pandas as pd

from archive.present import PresentCache


def _rows(n: int, start: int = 0) -> pd.DataFrame:
    return pd.DataFrame({"v": range(start, start + n)})


def test_a_growing_chunk_copy_is_dropped_at_the_bound():
    cache = PresentCache(max_rows=10)
    cache.add("s", 1, _rows(6), whole=True)
    cache.add("s", 1, _rows(3, 6))
    assert cache.rows() == 9
    cache.add("s", 1, _rows(3, 9))  # 12 > 10: the copy goes, nothing is kept half
    assert cache.rows() == 0 and cache.keys() == []
    loaded = cache.get("s", 1, lambda: _rows(12))  # the next read comes from the database
    assert list(loaded["v"]) == list(range(12))
    assert cache.rows() == 0  # still over the bound: not cached


def test_other_chunks_stay_cached_when_one_is_dropped():
    cache = PresentCache(max_rows=10)
    cache.add("s", 1, _rows(4), whole=True)
    cache.add("t", 1, _rows(4), whole=True)
    cache.add("s", 1, _rows(4, 4))
    assert cache.keys() == [("t", 1)] and cache.rows() == 4
