"""A chunk of past contexts, stored once as a sparse TF matrix (M 3.5, 4.5.2).

M 3.5: "The TF_k for each attribute-value k in a context can be computed once and stored
with the context." A :class:`ContextChunk` is one chunk of history of one event type:
one row per past event, one column per vocabulary term, TF as the value; IDF is applied
only when the chunk is scored (:mod:`similarity.scorer`), so the same chunk serves every
later event whatever the statistics have become.

The TF matrix is kept in CSC form: a new event's context has few terms, and the dot
product only needs those columns. TF squared is kept again in CSR form, for the norms,
which need every entry (a row-major gather mat-vec is the fastest pass over it). Columns are vocabulary columns; a chunk built when the
vocabulary was smaller simply has fewer columns (``n_cols``), and scoring pads.

Numeric attributes are kept as coordinate triples per attribute: ``rows`` (int32),
``values`` and ``tf`` (each distinct value of a context once, with its multiplicity).

All rows of a chunk belong to one :class:`~similarity.stats.ContextStatistics` (its
vocabulary numbers the columns).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from similarity.errors import SimilarityError
from similarity.terms import Context, ContextBag
from similarity.vocabulary import Vocabulary


@dataclass(frozen=True, eq=False)
class NumericEntries:
    """The values of one numeric attribute in a chunk: row, value, TF per entry."""

    rows: np.ndarray
    values: np.ndarray
    tf: np.ndarray


def ts_key(ts: Any) -> np.ndarray:
    """Timestamps as a numeric array ordering like time: numbers stay as they are,
    ``datetime64`` become int64 nanoseconds."""
    arr = np.asarray(ts)
    if np.issubdtype(arr.dtype, np.datetime64):
        return arr.astype("datetime64[ns]").astype(np.int64)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise SimilarityError(f"timestamps must be numbers or datetime64, got dtype {arr.dtype}")
    return arr


@dataclass(frozen=True, eq=False)
class ContextChunk:
    """``n`` past events (``eids``, ``ts``) and their contexts as TF (see module doc)."""

    eids: np.ndarray
    ts: np.ndarray
    tf: sp.csc_matrix
    tf_sq: sp.csr_matrix
    """TF squared, row-major: the norms are a gather mat-vec over all of it."""
    numeric: Mapping[str, NumericEntries] = field(default_factory=dict)
    _memo: list = field(default_factory=lambda: [None], init=False, compare=False, repr=False)

    @property
    def n(self) -> int:
        return int(self.eids.shape[0])

    @property
    def n_cols(self) -> int:
        return int(self.tf.shape[1])

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_bags(
        cls, eids: Sequence[Any] | np.ndarray, ts: Sequence[Any] | np.ndarray,
        bags: Sequence[ContextBag], vocabulary: Vocabulary,
    ) -> ContextChunk:
        """Build from bags; terms new to ``vocabulary`` are appended to it (C_k stays 0
        until learned, so they weigh ``log E``, see :mod:`similarity.idf`)."""
        if not (len(eids) == len(ts) == len(bags)):
            raise SimilarityError(f"eids, ts and contexts differ in length: {len(eids)}, {len(ts)}, {len(bags)}")
        indptr = np.zeros(len(bags) + 1, dtype=np.int64)
        cols: list[int] = []
        counts: list[int] = []
        num: dict[str, tuple[list[int], list[float], list[int]]] = {}
        for i, bag in enumerate(bags):
            for t, c in bag.terms.items():
                cols.append(vocabulary.add(t))
                counts.append(c)
            indptr[i + 1] = len(cols)
            for attr, values in bag.numeric.items():
                r, v, f = num.setdefault(attr, ([], [], []))
                for value, c in values.items():
                    r.append(i)
                    v.append(value)
                    f.append(c)
        csr = sp.csr_matrix(
            (np.asarray(counts, dtype=np.float64), np.asarray(cols, dtype=np.int32), indptr),
            shape=(len(bags), len(vocabulary)),
        )
        numeric = {
            a: NumericEntries(np.asarray(r, dtype=np.int32), np.asarray(v, dtype=np.float64),
                              np.asarray(f, dtype=np.float64))
            for a, (r, v, f) in num.items()
        }
        return cls.from_tf(eids, ts, csr, numeric)

    @classmethod
    def from_contexts(
        cls, eids: Sequence[Any] | np.ndarray, ts: Sequence[Any] | np.ndarray,
        contexts: Iterable[Context], stats: Any,
    ) -> ContextChunk:
        """Build from raw contexts (bags of tuples) of ``stats``' event type
        (a :class:`~similarity.stats.ContextStatistics`: its config and vocabulary)."""
        bags = [stats.bag(c) for c in contexts]
        return cls.from_bags(eids, ts, bags, stats.vocabulary)

    @classmethod
    def from_tf(
        cls, eids: Sequence[Any] | np.ndarray, ts: Sequence[Any] | np.ndarray,
        tf: sp.spmatrix | sp.sparray, numeric: Mapping[str, NumericEntries] | None = None,
    ) -> ContextChunk:
        """Build from a TF matrix whose columns are vocabulary columns (e.g. TF rows
        persisted as (column, count) pairs and read back)."""
        eid_arr = np.asarray(eids)
        ts_arr = ts_key(ts)
        if tf.shape[0] != eid_arr.shape[0] or ts_arr.shape[0] != eid_arr.shape[0]:
            raise SimilarityError(
                f"TF matrix has {tf.shape[0]} rows for {eid_arr.shape[0]} eids and {ts_arr.shape[0]} timestamps"
            )
        if sp.issparse(tf) and tf.format == "csr":  # one conversion: CSR (canonical) -> CSC
            r = sp.csr_matrix(tf, dtype=np.float64)
            r.sum_duplicates()
            if r.nnz and r.data.min() < 0:
                raise SimilarityError("TF values must be >= 0")
            sq = sp.csr_matrix((r.data * r.data, r.indices, r.indptr), shape=r.shape)
            m = r.tocsc()
            m.sort_indices()
            return cls(eids=eid_arr, ts=ts_arr, tf=m, tf_sq=sq, numeric=dict(numeric or {}))
        m = sp.csc_matrix(tf, dtype=np.float64)
        m.sum_duplicates()
        m.sort_indices()
        if m.nnz and m.data.min() < 0:
            raise SimilarityError("TF values must be >= 0")
        sq = sp.csc_matrix((m.data * m.data, m.indices, m.indptr), shape=m.shape).tocsr()
        return cls(eids=eid_arr, ts=ts_arr, tf=m, tf_sq=sq, numeric=dict(numeric or {}))

    @classmethod
    def concat(cls, chunks: Sequence[ContextChunk]) -> ContextChunk:
        """One chunk holding the rows of all ``chunks`` (columns padded to the widest)."""
        if not chunks:
            return cls.from_tf(np.zeros(0, dtype=np.int64), np.zeros(0), sp.csc_matrix((0, 0)))
        width = max(c.n_cols for c in chunks)
        mats = [_widen(c.tf, width) for c in chunks]
        offsets = np.cumsum([0] + [c.n for c in chunks])
        numeric: dict[str, NumericEntries] = {}
        for attr in sorted({a for c in chunks for a in c.numeric}):
            parts = [(c.numeric[attr], off) for c, off in zip(chunks, offsets, strict=False) if attr in c.numeric]
            numeric[attr] = NumericEntries(
                np.concatenate([e.rows.astype(np.int64) + off for e, off in parts]),
                np.concatenate([e.values for e, _ in parts]),
                np.concatenate([e.tf for e, _ in parts]),
            )
        return cls.from_tf(
            np.concatenate([c.eids for c in chunks]), np.concatenate([c.ts for c in chunks]),
            sp.vstack(mats, format="csc"), numeric,
        )

    # -- per-table memo (see similarity.scorer) ------------------------------------------
    def memo(self, token: int) -> Any:
        """What :meth:`remember` stored for table ``token``, else ``None`` (one entry)."""
        held = self._memo[0]
        return held[1] if held is not None and held[0] == token else None

    def remember(self, token: int, value: Any) -> None:
        self._memo[0] = (token, value)


def _widen(m: sp.csc_matrix, width: int) -> sp.csc_matrix:
    """``m`` with empty columns appended up to ``width`` (a newer, larger vocabulary)."""
    if m.shape[1] >= width:
        return m
    indptr = np.concatenate([m.indptr, np.full(width - m.shape[1], m.indptr[-1], dtype=m.indptr.dtype)])
    return sp.csc_matrix((m.data, m.indices, indptr), shape=(m.shape[0], width))
