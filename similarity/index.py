"""A chunk's similarity index, built once, vectorised (M 3.5, 4.5.2).

M 3.5: "The TF_k for each attribute-value k in a context can be computed once and stored
with the context." A :class:`ChunkIndex` is one chunk of an event type's past events as
a :class:`~similarity.chunk.ContextChunk` (sparse TF keyed by the vocabulary's term ids),
with what the operator needs next to the matrix rows: each past event's key attributes
(``keys``, for incident grouping) and its surrounding tuples. :func:`build` makes it from
the rows of the Similarity Recall history-query, ``(eid, ts, attr, value, part)`` with
``part`` one of ``event`` (``value``: the event's incident key), ``context:<stream>``,
``surrounding:<stream>``, with
pandas factorize and one scipy COO matrix: the only Python loop is over the chunk's
*distinct* terms (to number them in the vocabulary), never over rows or events.
:func:`build_coded` makes the same index from the wide, archived form read with
``COPY`` (one dictionary-coded column per attribute), which is how a sealed chunk's
index is built (no long-form rows, no Python object per tuple).

The terms are those of :func:`similarity.terms.bag_of` over the same rows: ``attr=value``
with the value as text, nulls ignored, declared numeric attributes as float values
(a value that is not a finite number raises :class:`NonNumericValue`, text ``NaN`` is
null as ``float("NaN")`` is). Pure: no I/O (serialization is in :mod:`similarity.index_codec`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from similarity.chunk import ContextChunk, NumericEntries
from similarity.config import SimilarityConfig
from similarity.errors import NonNumericValue, SimilarityError
from similarity.terms import numeric_value
from similarity.vocabulary import Vocabulary

ROW_COLUMNS = ("eid", "ts", "attr", "value", "part")
_NO_ROWS = pd.DataFrame(columns=list(ROW_COLUMNS))


@dataclass(frozen=True, eq=False)
class ChunkIndex:
    """One chunk's past events: TF matrix (``chunk``), key attributes and surrounding rows."""

    chunk: ContextChunk
    keys: dict[str, np.ndarray] = field(default_factory=dict)
    """``"key"``: each matrix row's incident key (text, or None), from its event row's value."""
    surrounding: pd.DataFrame = field(default_factory=lambda: _NO_ROWS)
    """Long-form surrounding rows (read only: an index without any shares one empty frame)."""
    contexts: int = 0
    """How many context rows the chunk was built from (for build rates)."""
    span: int = 1
    """How many archive chunks it holds (:meth:`concat` of a run of chunks: more than one)."""
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def concat(cls, parts: Sequence[ChunkIndex]) -> ChunkIndex:
        """One index holding the rows of ``parts`` in their order (a run of consecutive
        chunks read as one, newest first): matrices stacked, columns padded to the widest,
        keys and surrounding rows concatenated.

        >>> import scipy.sparse as sp
        >>> def one(eid, ts, key):
        ...     return ChunkIndex(ContextChunk.from_tf([eid], [ts], sp.csr_matrix([[1.0]])), {"key": np.array([key], dtype=object)})
        >>> ix = ChunkIndex.concat([one("b", 20, "k2"), one("a", 10, "k1")])
        >>> ix.n, ix.span, ix.chunk.eids.tolist(), ix.keys["key"].tolist()
        (2, 2, ['b', 'a'], ['k2', 'k1'])
        """
        if len(parts) == 1:
            return parts[0]
        names = sorted({k for p in parts for k in p.keys})
        keys = {k: np.concatenate([p.keys[k] if k in p.keys else np.full(p.n, None, dtype=object) for p in parts])
                for k in names}
        sur = [p.surrounding for p in parts if len(p.surrounding)]
        return cls(ContextChunk.concat([p.chunk for p in parts]), keys,
                   pd.concat(sur, ignore_index=True) if len(sur) > 1 else (sur[0] if sur else _NO_ROWS),
                   sum(p.contexts for p in parts), sum(p.span for p in parts))

    def memo(self, key: Any, make) -> Any:
        """``make()`` once per ``key`` for this chunk (what every event's task derives
        from the chunk alone, e.g. its incidents under a rule); thread-safe enough: two
        racing tasks compute the same value."""
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = make()
        return hit

    @property
    def n(self) -> int:
        return self.chunk.n

    def __len__(self) -> int:
        return self.chunk.n

    @property
    def nbytes(self) -> int:
        """Memory held: matrices, arrays, surrounding rows and the per-table norms memo."""
        c = self.chunk
        total = sum(a.nbytes for m in (c.tf, c.tf_sq) for a in (m.data, m.indices, m.indptr))
        total += _array_bytes(c.eids) + c.ts.nbytes + 8 * c.n  # + the norms remembered per table
        total += sum(e.rows.nbytes + e.values.nbytes + e.tf.nbytes for e in c.numeric.values())
        total += sum(_array_bytes(v) for v in self.keys.values())
        if len(self.surrounding):
            total += int(self.surrounding.memory_usage(deep=True).sum())
        return int(total)

    def context_of(self, row: int, vocabulary: Vocabulary) -> list[dict[str, Any]]:
        """Row ``row``'s context as single-attribute tuples (order: by term id, then
        numeric attributes), each repeated TF times."""
        m = self.chunk.tf_sq  # same sparsity as TF, row-major; TF = sqrt(TF^2) (counts)
        lo, hi = m.indptr[row], m.indptr[row + 1]
        out: list[dict[str, Any]] = []
        counts = np.rint(np.sqrt(m.data[lo:hi])).astype(np.int64).tolist()
        for col, count in zip(m.indices[lo:hi].tolist(), counts, strict=True):
            attr, value = vocabulary.term(col).split("=", 1)
            out.extend({attr: value} for _ in range(count))
        for attr, e in sorted(self.chunk.numeric.items()):
            mine = e.rows == row
            for v, f in zip(e.values[mine].tolist(), e.tf[mine].tolist(), strict=True):
                out.extend({attr: v} for _ in range(int(f)))
        return out


def _array_bytes(a: np.ndarray) -> int:
    if a.dtype != object:
        return int(a.nbytes)
    xs = a.tolist()
    try:
        chars = len("".join(xs))  # all str: one C pass
    except TypeError:
        chars = sum(len(str(x)) for x in xs if x is not None)
    return int(a.nbytes + 49 * a.shape[0] + chars)


def _part_mask(parts: pd.Series, pred) -> np.ndarray:
    codes, uniques = pd.factorize(parts)
    keep = np.fromiter((bool(pred(u)) for u in uniques), dtype=bool, count=len(uniques))
    return keep[codes] if len(codes) else np.zeros(0, dtype=bool)


def build(rows: pd.DataFrame, vocabulary: Vocabulary, config: SimilarityConfig | None = None) -> ChunkIndex:
    """The :class:`ChunkIndex` of one chunk's long-form rows (module doc). Terms new to
    ``vocabulary`` are appended to it. Events are the distinct eids of ``part == 'event'``
    rows, in their order; context rows of other eids are ignored."""
    config = config if config is not None else SimilarityConfig()
    missing = [c for c in ROW_COLUMNS if c not in rows.columns]
    if missing:
        raise SimilarityError(f"chunk rows lack column(s) {missing}; expected {list(ROW_COLUMNS)}")
    parts = rows["part"]
    is_event = _part_mask(parts, lambda p: p == "event")
    ev = rows[is_event].drop_duplicates("eid")
    eids = ev["eid"].astype(str).to_numpy(dtype=object)
    ts = pd.to_datetime(ev["ts"], utc=True).to_numpy(dtype="datetime64[ns]")
    n = eids.shape[0]
    row_of = pd.Index(eids)
    key = ev["value"]
    keys = {"key": np.where(key.notna().to_numpy(), key.astype(str).to_numpy(dtype=object), None)}
    ctx = rows[_part_mask(parts, lambda p: isinstance(p, str) and p.startswith("context:"))]
    r = row_of.get_indexer(ctx["eid"].astype(str)) if len(ctx) else np.zeros(0, dtype=np.int64)
    attrs = ctx["attr"].to_numpy(dtype=object)
    values = ctx["value"]
    keep = (r >= 0) & values.notna().to_numpy()
    if config.ignore and len(ctx):
        keep &= ~pd.Series(attrs).isin(list(config.ignore)).to_numpy()
    r, attrs, values = r[keep], attrs[keep], values.to_numpy(dtype=object)[keep]
    declared = list(config.numeric)
    is_num = pd.Series(attrs).isin(declared).to_numpy() if declared else np.zeros(r.shape[0], dtype=bool)
    tf = _categorical(r[~is_num], attrs[~is_num], values[~is_num], n, vocabulary)
    numeric = _numeric(r[is_num], attrs[is_num], values[is_num])
    chunk = ContextChunk.from_tf(eids, ts, tf, numeric)
    sur = rows[_part_mask(parts, lambda p: isinstance(p, str) and p.startswith("surrounding:"))]
    sur = sur[sur["eid"].astype(str).isin(row_of)][list(ROW_COLUMNS)].reset_index(drop=True)
    return ChunkIndex(chunk, keys, sur, contexts=int(len(ctx)))


@dataclass(frozen=True, eq=False)
class CodedColumn:
    """One context attribute of a chunk, dictionary-coded (the wide, archived form):
    for each context tuple, the row of its event (``rows``, -1: not an event of the
    chunk) and the code of its value (``codes``, -1: null) into ``uniques`` (the
    values as text, as ``col::text`` gives them)."""

    attr: str
    rows: np.ndarray
    codes: np.ndarray
    uniques: Sequence[str]


def build_coded(eids: np.ndarray, ts_ns: np.ndarray, keys: np.ndarray, columns: Sequence[CodedColumn],
                vocabulary: Vocabulary, config: SimilarityConfig | None = None,
                surrounding: pd.DataFrame | None = None) -> ChunkIndex:
    """The :class:`ChunkIndex` of one chunk in wide, dictionary-coded form: the same
    index :func:`build` makes from the long-form rows of the same tuples (terms, TF,
    numeric entries, keys), with one Python step per *distinct* value of each attribute
    and none per tuple. ``eids`` (distinct; a ``pandas.Index`` is used as it is, its
    hash table reused), ``ts_ns`` and ``keys`` are the chunk's events; ``surrounding`` is long form (``ROW_COLUMNS``)."""
    config = config if config is not None else SimilarityConfig()
    at = eids if isinstance(eids, pd.Index) else pd.Index(np.asarray(eids, dtype=object))  # hashed once
    if at.has_duplicates:
        raise SimilarityError("build_coded: the chunk's event ids must be distinct (drop repeated eids first)")
    eids = np.asarray(at, dtype=object)
    n = eids.shape[0]
    r_parts, c_parts, numeric_parts = [], [], {}
    for col in columns:
        rows = np.asarray(col.rows, dtype=np.int64)
        codes = np.asarray(col.codes, dtype=np.int64)
        if col.attr in config.ignore:
            continue
        keep = (rows >= 0) & (codes >= 0)
        rows, codes = rows[keep], codes[keep]
        if col.attr in config.numeric:
            values = np.asarray(col.uniques, dtype=object)[codes] if len(col.uniques) else np.zeros(0, dtype=object)
            numeric_parts[col.attr] = (rows, values)
            continue
        used = np.flatnonzero(np.bincount(codes, minlength=len(col.uniques)))
        col_of = np.full(len(col.uniques), -1, dtype=np.int64)
        uniques = col.uniques
        col_of[used] = vocabulary.add_values(col.attr, [str(uniques[u]) for u in used.tolist()])
        r_parts.append(rows)
        c_parts.append(col_of[codes])
    r = np.concatenate(r_parts) if r_parts else np.zeros(0, dtype=np.int64)
    c = np.concatenate(c_parts) if c_parts else np.zeros(0, dtype=np.int64)
    tf = sp.csr_matrix((np.ones(r.shape[0], dtype=np.float64), (r, c)), shape=(n, len(vocabulary)))
    numeric: dict[str, NumericEntries] = {}
    for attr in sorted(numeric_parts):
        rows, values = numeric_parts[attr]
        numeric.update(_numeric(rows, np.full(rows.shape[0], attr, dtype=object), values))
    chunk = ContextChunk.from_tf(eids, np.asarray(ts_ns, dtype=np.int64).astype("datetime64[ns]"), tf, numeric)
    key = np.asarray(keys, dtype=object)
    sur = surrounding if surrounding is not None else _NO_ROWS
    if len(sur):
        sur = sur[sur["eid"].astype(str).isin(pd.Index(eids))][list(ROW_COLUMNS)].reset_index(drop=True)
    contexts = sum(int(np.asarray(c.rows).shape[0]) for c in columns)
    return ChunkIndex(chunk, {"key": key}, sur, contexts=contexts)


def _categorical(r: np.ndarray, attrs: np.ndarray, values: np.ndarray, n: int,
                 vocabulary: Vocabulary) -> sp.csr_matrix:
    """TF of ``attr=value`` terms: pairs factorized, distinct terms numbered once."""
    if r.shape[0] == 0:
        return sp.csr_matrix((n, len(vocabulary)), dtype=np.float64)
    a_codes, a_uni = pd.factorize(attrs)
    v_codes, v_uni = pd.factorize(pd.Series(values, dtype=object).astype(str).to_numpy(dtype=object))
    pair = a_codes.astype(np.int64) * np.int64(len(v_uni)) + v_codes
    p_codes, p_uni = pd.factorize(pair)
    a_of, v_of = np.divmod(np.asarray(p_uni, dtype=np.int64), np.int64(len(v_uni)))
    add = vocabulary.add
    col_of = np.fromiter((add(f"{a}={v}") for a, v in zip(a_uni[a_of].tolist(), v_uni[v_of].tolist(),
                                                          strict=True)),
                         dtype=np.int32, count=len(p_uni))
    cols = col_of[p_codes]
    return sp.coo_matrix((np.ones(r.shape[0], dtype=np.float64), (r, cols)),
                         shape=(n, len(vocabulary))).tocsr()


def _numeric(r: np.ndarray, attrs: np.ndarray, values: np.ndarray) -> dict[str, NumericEntries]:
    """Per numeric attribute: distinct (row, value) with multiplicity; rules of bag_of."""
    if r.shape[0] == 0:
        return {}
    parsed = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(parsed)
    for i in np.flatnonzero(bad).tolist():  # rare: exact Python semantics for what pandas refused
        try:
            x = float(values[i])
        except (TypeError, ValueError):
            raise NonNumericValue(str(attrs[i]), values[i]) from None
        if not math.isnan(x):
            numeric_value(str(attrs[i]), x)  # raises for +-inf
        parsed[i] = x
    ok = ~np.isnan(parsed)
    frame = pd.DataFrame({"a": attrs[ok], "r": r[ok], "v": parsed[ok]})
    out = {}
    for attr, grp in frame.groupby("a", sort=True):
        counts = grp.groupby(["r", "v"], sort=True).size()
        idx = counts.index
        out[str(attr)] = NumericEntries(idx.get_level_values(0).to_numpy(dtype=np.int32),
                                        idx.get_level_values(1).to_numpy(dtype=np.float64),
                                        counts.to_numpy(dtype=np.float64))
    return out
