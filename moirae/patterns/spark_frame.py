"""The pattern operator's output frames, built straight from their columns (T 4).

The live operator (:mod:`moirae.patterns.spark_processor`) yields one small pandas frame
for each key that has matches in a step, so building a frame is a per-key cost.
:func:`frame` gives what ``pd.DataFrame(dict(zip(names, columns)))`` gives (the same
columns, dtypes and values; a list or an array of objects is inferred as the constructor
infers it), but puts each column in its own block instead of going through the
constructor's checks and consolidation, and reuses the column and row indexes of frames
of the same shape (pandas shares indexes between frames likewise: they are immutable).
Where pandas' internals it uses are missing it is the constructor.

>>> import numpy as np
>>> f = frame(("a", "b"), [np.array([1, 2]), ["x", None]])
>>> f.dtypes.tolist(), f["b"].tolist()
([dtype('int64'), dtype('O')], ['x', None])
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd

try:
    from pandas._libs.internals import BlockPlacement
    from pandas.core.arrays import DatetimeArray
    from pandas.core.construction import extract_array, sanitize_array
    from pandas.core.dtypes.cast import maybe_infer_to_datetimelike
    from pandas.core.internals.blocks import NumpyBlock, ensure_block_shape, maybe_coerce_values, new_block
    from pandas.core.internals.managers import BlockManager
except ImportError:  # pragma: no cover - another pandas: the constructor
    BlockManager = None

#: numpy dtype kinds the constructor keeps as they are
_PLAIN = frozenset("biufc")
_UTC = pd.DatetimeTZDtype("ns", "UTC")
try:
    _INFER_STRING = bool(pd.get_option("future.infer_string"))
except (KeyError, pd.errors.OptionError):  # pragma: no cover - a pandas without the option
    _INFER_STRING = False
_COLUMNS: dict[tuple[str, ...], pd.Index] = {}
_ROWS: dict[int, pd.RangeIndex] = {}
_PLACES: list = []
_CACHED = 256  # the most indexes of either kind kept


def _columns(names: tuple[str, ...]) -> pd.Index:
    ix = _COLUMNS.get(names)
    if ix is None:
        if len(_COLUMNS) >= _CACHED:
            _COLUMNS.clear()
        ix = _COLUMNS[names] = pd.Index(list(names), dtype=object)
    return ix


def _rows(n: int) -> pd.RangeIndex:
    ix = _ROWS.get(n)
    if ix is None:
        ix = pd.RangeIndex(n)
        if n < _CACHED:
            _ROWS[n] = ix
    return ix


def frame(names: tuple[str, ...], columns: Sequence, kept: frozenset = frozenset()) -> pd.DataFrame:
    """A frame of ``columns`` (numpy arrays, pandas arrays or lists, of one length) named
    ``names`` (unique), as the ``DataFrame`` constructor makes it (see the module
    docstring). ``kept``: names of object columns whose values are never times, kept as
    they are without inferring a type (strings, lists)."""
    if BlockManager is None or len(set(names)) != len(names) or len(names) != len(columns):
        return pd.DataFrame(dict(zip(names, columns, strict=True)), copy=False)
    n = len(columns[0]) if len(columns) else 0
    return _frame(names, [_values(c, v, kept, n) for c, v in zip(names, columns, strict=True)], n)


def concat(names: tuple[str, ...], parts: Sequence[Sequence], kept: frozenset = frozenset()) -> pd.DataFrame:
    """The frames of ``parts`` (each a sequence of columns, as :func:`frame` takes them)
    put end to end, as ``pd.concat(frames, ignore_index=True)`` gives them: where every
    column has one type in all the parts, their arrays joined; otherwise through
    ``pd.concat`` (which then finds each column's type; a column all NULL in a part does
    not decide it).

    >>> import numpy as np
    >>> f = concat(("a", "b"), [[np.array([1]), ["x"]], [np.array([2, 3]), ["y", None]]])
    >>> f.dtypes.tolist(), f["a"].tolist(), f["b"].tolist()
    ([dtype('int64'), dtype('O')], [1, 2, 3], ['x', 'y', None])
    """
    if BlockManager is None or len(set(names)) != len(names):
        return _pd_concat([pd.DataFrame(dict(zip(names, cols, strict=True)), copy=False) for cols in parts])
    values = []
    for cols in parts:
        n = len(cols[0]) if len(cols) else 0
        values.append([_values(c, v, kept, n) for c, v in zip(names, cols, strict=True)])
    if len(values) == 1 or any(len({str(vs[i].dtype) for vs in values}) > 1 for i in range(len(names))):
        return _pd_concat([_frame(names, vs, len(vs[0]) if vs else 0) for vs in values])
    joined = [np.concatenate(col) if isinstance(col[0], np.ndarray) else type(col[0])._concat_same_type(col)
              for col in zip(*values, strict=True)]
    return _frame(names, joined, len(joined[0]) if joined else 0)


def _pd_concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    if len(frames) == 1:
        return frames[0]
    with warnings.catch_warnings():  # a column all NULL in one part keeps the others' type
        warnings.simplefilter("ignore", FutureWarning)
        return pd.concat(frames, ignore_index=True)


def _values(name: str, v, kept: frozenset, n: int):
    """Column ``v`` as the constructor holds it (a 1-d numpy or pandas array)."""
    if type(v) is np.ndarray and v.ndim == 1:
        kind = v.dtype.kind
        if not (kind in _PLAIN or (kind == "O" and (name in kept or _strings(v)))):
            v = maybe_coerce_values(extract_array(maybe_infer_to_datetimelike(v) if kind == "O"
                                                  else sanitize_array(v, None), extract_numpy=True))
    elif type(v) is DatetimeArray and v.ndim == 1:
        v = maybe_coerce_values(v)
    else:
        v = maybe_coerce_values(extract_array(sanitize_array(extract_array(v, extract_numpy=True), None),
                                              extract_numpy=True))
    if len(v) != n:
        raise ValueError(f"column {name!r} has {len(v)} rows, not {n}")
    return v


def _strings(v: np.ndarray) -> bool:
    """Whether every value of an array of objects is a ``str`` (which the constructor
    keeps as it is, unless pandas infers strings as its own type)."""
    return not _INFER_STRING and len(v) > 0 and all(type(x) is str for x in v)


def _places(n: int) -> list:
    """The placements of a frame's ``n`` one-column blocks (immutable, shared, as pandas
    shares them between blocks)."""
    while len(_PLACES) < n:
        _PLACES.append(BlockPlacement(slice(len(_PLACES), len(_PLACES) + 1)))
    return _PLACES


def _frame(names: tuple[str, ...], values: list, n: int) -> pd.DataFrame:
    """The frame of columns as :func:`_values` gives them."""
    blocks = []
    places = _places(len(values))
    for i, v in enumerate(values):
        place = places[i]
        if type(v) is np.ndarray:
            blocks.append(NumpyBlock(v.reshape(1, n), place, 2))
        else:
            blocks.append(new_block(ensure_block_shape(v, 2), place, ndim=2))
    mgr = BlockManager(tuple(blocks), [_columns(tuple(names)), _rows(n)], verify_integrity=False)
    return pd.DataFrame._from_mgr(mgr, axes=mgr.axes)


def utc_times(ns: np.ndarray):
    """int64 ns since the epoch as a ``datetime64[ns, UTC]`` array (as
    ``pd.DatetimeIndex(ns.view("datetime64[ns]")).tz_localize("UTC")`` holds them).

    >>> utc_times(np.array([0], dtype=np.int64))[0]
    Timestamp('1970-01-01 00:00:00+0000', tz='UTC')
    """
    ns = np.asarray(ns, dtype=np.int64)
    if BlockManager is not None:
        return DatetimeArray._simple_new(ns.view("datetime64[ns]"), dtype=_UTC)
    return pd.DatetimeIndex(ns.view("datetime64[ns]")).tz_localize("UTC").array  # pragma: no cover


__all__ = ["concat", "frame", "utc_times"]
