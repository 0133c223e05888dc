"""Archived rows read as their flags say they are (H 4: a deleted tuple counts as zero).

Rows marked bad after the fact stay in the archive, flagged (the engine's retractions keep
the flags; this package does not know their tables). A history-query must then read each
flagged stream *without* its removed rows and with its corrected rows' new values, so what
it computes equals a run over an archive that never held the bad values.

:func:`flagged_template` rewrites a template so: each reference to a flagged stream
becomes that stream without the rows whose ``_sid`` is bound in
``:moirae_flag_hidden_<i>`` (removed or corrected), plus the corrected rows bound as a JSON
array in ``:moirae_flag_fixed_<i>`` (``i``: the stream's place in the sorted flagged
streams). The chunk slicing of :func:`archive.history.render` then applies to the inner
reference as to any other, so the corrected rows given must be those of the chunk read.
It stays one read-only SELECT; the values are always bound, never formatted in.

A :class:`RowFlags` says which streams have flags (cheaply, for every history-query)
and gives those of one stream over one task interval; :func:`flag_params` binds them.
:class:`FixedFlags` holds a given set of flags (a re-evaluation "as if" some flags held).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

import sqlglot
from sqlglot import exp

from archive.names import quote

HIDDEN, FIXED = "moirae_flag_hidden", "moirae_flag_fixed"


class RowFlags(Protocol):
    """Where the active flags of archived rows come from."""

    def flagged_streams(self) -> frozenset[str]:
        """The streams with any active flag (asked before every history-query: keep it cheap)."""

    def chunk_flags(self, stream: str, lo: datetime, hi: datetime) -> tuple[list[int], list[dict]]:
        """The source ids of ``stream``'s rows with ``lo <= ts < hi`` to hide (removed or
        corrected), and the corrected rows among them as whole rows (every column,
        ``_sid`` too) holding their new values."""


class FixedFlags:
    """Given flags: ``removed`` source ids, and ``rows(stream, lo, hi)`` giving the
    corrected rows of ``stream`` with ``lo <= ts < hi`` (whole, with new values)."""

    def __init__(self, streams: Iterable[str], removed: Iterable[int], corrected: Iterable[int] = (),
                 rows=None) -> None:
        self._removed = {int(s) for s in removed}
        self.hidden = sorted(self._removed | {int(s) for s in corrected})
        self._streams = frozenset(streams) if self.hidden else frozenset()
        self._rows = rows

    def flagged_streams(self) -> frozenset[str]:
        return self._streams

    def chunk_flags(self, stream: str, lo: datetime, hi: datetime) -> tuple[list[int], list[dict]]:
        rows = [] if self._rows is None else self._rows(stream, lo, hi)
        return self.hidden, [r for r in rows if int(r["_sid"]) not in self._removed]  # removed wins


@functools.lru_cache(maxsize=512)
def _flagged(sql: str, streams: tuple[str, ...]) -> str:
    index = {s: i for i, s in enumerate(streams)}
    tree = sqlglot.parse_one(sql, read="postgres")
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and node.name in index and node.name not in ctes:
            i, t = index[node.name], quote(node.name)
            return sqlglot.parse_one(
                f"(SELECT * FROM {t} WHERE NOT _sid = ANY(CAST(:{HIDDEN}_{i} AS BIGINT[])) UNION ALL "
                f"SELECT * FROM jsonb_populate_recordset(CAST(NULL AS {t}), CAST(:{FIXED}_{i} AS JSONB))) "
                f"AS {quote(node.alias or node.name)}", read="postgres")
        return node

    return tree.transform(swap).sql(dialect="postgres")


def flagged_template(sql: str, streams: Iterable[str]) -> str:
    """``sql`` with each reference to one of ``streams`` read through its flags (module doc).

    >>> flagged_template("SELECT avg(h.bw) FROM metrics h WHERE h.sid = :sid", ["metrics"])[:64]
    'SELECT AVG(h.bw) FROM (SELECT * FROM "metrics" WHERE NOT _sid = '
    """
    return _flagged(sql, tuple(sorted(set(streams))))


def flag_params(flags: RowFlags, streams: Sequence[str], lo: datetime, hi: datetime) -> dict[str, Any]:
    """The parameters :func:`flagged_template` ``(sql, streams)`` binds, from ``flags``
    over ``[lo, hi)``."""
    out: dict[str, Any] = {}
    for i, s in enumerate(sorted(set(streams))):
        hidden, fixed = flags.chunk_flags(s, lo, hi)
        out[f"{HIDDEN}_{i}"] = sorted(int(x) for x in hidden)
        out[f"{FIXED}_{i}"] = json.dumps(list(fixed), default=str)
    return out


def flagged(flags: RowFlags | None, streams: Iterable[str]) -> list[str]:
    """Which of ``streams`` ``flags`` has active flags for (none without flags)."""
    if flags is None:
        return []
    on = flags.flagged_streams()
    return sorted(s for s in streams if s in on) if on else []

