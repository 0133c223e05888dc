"""Bytes of a :class:`~similarity.index.ChunkIndex`, and back (pure: bytes in memory).

Layout: ``MSIX`` magic, a format version byte, the CRC-32 of the payload, then an
uncompressed ``.npz`` payload (no pickles): the TF matrix as CSR (``indptr``,
``indices``, TF ``counts``), eids and timestamps, numeric entries, key attributes and
surrounding rows. :func:`decode` raises :class:`CorruptIndex` for anything that is not a
whole, unaltered encoding, so the caller can rebuild the chunk from the archive.

>>> import pandas as pd
>>> from similarity.index import build
>>> from similarity.vocabulary import Vocabulary
>>> rows = pd.DataFrame({"eid": ["a", "a"], "ts": [pd.Timestamp(0, tz="UTC")] * 2,
...                      "attr": [None, "u"], "value": ["h1", "x"], "part": ["event", "context:c"]})
>>> ix = build(rows, Vocabulary())
>>> back = decode(encode(ix))
>>> list(back.chunk.eids), back.keys["key"].tolist(), back.chunk.tf.toarray().tolist()
(['a'], ['h1'], [[1.0]])
>>> decode(b"garbage")
Traceback (most recent call last):
...
similarity.index_codec.CorruptIndex: not a chunk index (bad magic or truncated)
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pandas as pd
import scipy.sparse as sp

from similarity.chunk import ContextChunk, NumericEntries
from similarity.errors import SimilarityError
from similarity.index import ROW_COLUMNS, ChunkIndex

MAGIC = b"MSIX"
VERSION = 1
_HEAD = struct.Struct("<4sBI")


class CorruptIndex(SimilarityError):
    """Bytes that are not a valid chunk index (truncated, altered, other version)."""


def _text(a) -> np.ndarray:
    """Object array of str/None as (unicode array, null mask)."""
    arr = np.asarray(a, dtype=object)
    null = np.asarray(arr == None, dtype=bool) if arr.shape[0] else np.zeros(0, dtype=bool)  # noqa: E711 (elementwise)
    return np.where(null, "", arr).astype(str), null


def encode(ix: ChunkIndex) -> bytes:
    c = ix.chunk
    csr = c.tf.tocsr()
    counts = csr.data
    if counts.size and counts.max() < 65536 and np.all(counts == np.round(counts)):
        counts = counts.astype(np.uint8 if counts.max() < 256 else np.uint16)
    # the narrowest integer types that hold them: less to write, to log and to read back
    indices = csr.indices.astype(np.uint16 if csr.shape[1] <= 65536 else np.int32)
    indptr = csr.indptr.astype(np.int32 if csr.nnz < 2**31 else np.int64)
    arrays = {"indptr": indptr, "indices": indices, "counts": counts,
              "shape": np.asarray(csr.shape, dtype=np.int64), "eids": np.asarray(c.eids).astype(str),
              "ts": np.asarray(c.ts, dtype=np.int64), "contexts": np.asarray([ix.contexts], dtype=np.int64)}
    for attr, e in c.numeric.items():
        arrays[f"num_rows:{attr}"], arrays[f"num_values:{attr}"], arrays[f"num_tf:{attr}"] = e.rows, e.values, e.tf
    for attr, v in ix.keys.items():
        arrays[f"key:{attr}"], arrays[f"keynull:{attr}"] = _text(v)
    sur = ix.surrounding
    if len(sur):
        arrays["sur_ts"] = pd.to_datetime(sur["ts"], utc=True).to_numpy(dtype="datetime64[ns]").astype(np.int64)
        for col in ("eid", "attr", "value", "part"):
            arrays[f"sur_{col}"], arrays[f"surnull_{col}"] = _text(sur[col].to_numpy(dtype=object))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    payload = buf.getvalue()
    return _HEAD.pack(MAGIC, VERSION, zlib.crc32(payload)) + payload


def decode(blob: bytes) -> ChunkIndex:
    blob = bytes(blob)
    if len(blob) < _HEAD.size:
        raise CorruptIndex("not a chunk index (bad magic or truncated)")
    magic, version, crc = _HEAD.unpack_from(blob)
    if magic != MAGIC:
        raise CorruptIndex("not a chunk index (bad magic or truncated)")
    if version != VERSION:
        raise CorruptIndex(f"chunk index format {version} is not supported (this code reads {VERSION})")
    payload = blob[_HEAD.size:]
    if zlib.crc32(payload) != crc:
        raise CorruptIndex("chunk index checksum mismatch (altered or truncated)")
    try:
        z = np.load(io.BytesIO(payload), allow_pickle=False)
        shape = tuple(int(x) for x in z["shape"])
        tf = sp.csr_matrix((z["counts"].astype(np.float64), z["indices"].astype(np.int32),
                            z["indptr"].astype(np.int64)), shape=shape)
        numeric = {k.split(":", 1)[1]: NumericEntries(z[k], z["num_values:" + k.split(":", 1)[1]],
                                                       z["num_tf:" + k.split(":", 1)[1]])
                   for k in z.files if k.startswith("num_rows:")}
        eids = z["eids"].astype(object)
        chunk = ContextChunk.from_tf(eids, z["ts"].astype("datetime64[ns]"), tf, numeric)
        keys = {k.split(":", 1)[1]: _untext(z[k], z["keynull:" + k.split(":", 1)[1]])
                for k in z.files if k.startswith("key:")}
        if "sur_ts" in z.files:
            sur = pd.DataFrame({c: _untext(z[f"sur_{c}"], z[f"surnull_{c}"]) for c in ("eid", "attr", "value", "part")})
            sur.insert(1, "ts", pd.to_datetime(z["sur_ts"], utc=True))
        else:
            sur = pd.DataFrame(columns=list(ROW_COLUMNS))
        return ChunkIndex(chunk, keys, sur[list(ROW_COLUMNS)], contexts=int(z["contexts"][0]))
    except CorruptIndex:
        raise
    except Exception as exc:  # a payload that passed the checksum but does not parse
        raise CorruptIndex(f"chunk index does not parse: {type(exc).__name__}: {exc}") from exc


def _untext(values: np.ndarray, null: np.ndarray) -> np.ndarray:
    out = values.astype(object)
    out[null] = None
    return out
