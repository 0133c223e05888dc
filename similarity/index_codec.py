"""Bytes of a :class:`~similarity.index.ChunkIndex`, and back (pure: bytes in memory).

Layout: ``MSIX`` magic, a format version byte, the CRC-32 of the payload, then the
payload (no pickles). Version 2 (:func:`encode`) is a length-prefixed JSON directory
followed by raw arrays, with text as UTF-8 and offsets: the TF matrix as CSR
(``indptr``, ``indices``, TF ``counts``), eids and timestamps, numeric entries, key
attributes and surrounding rows. It is about half the bytes of version 1 (an ``.npz``
with fixed-width UCS-4 text and every count), which is still read. :func:`decode` raises :class:`CorruptIndex` for anything that is not a
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
similarity.errors.CorruptIndex: not a chunk index (bad magic or truncated)
"""

from __future__ import annotations

import io
import json
import struct
import zlib

import numpy as np
import pandas as pd
import scipy.sparse as sp

from similarity.chunk import ContextChunk, NumericEntries
from similarity.errors import CorruptIndex, SimilarityError
from similarity.index import ROW_COLUMNS, ChunkIndex

MAGIC = b"MSIX"
VERSION = 2
_HEAD = struct.Struct("<4sBI")
_LEN = struct.Struct("<I")


def encode(ix: ChunkIndex) -> bytes:
    """Version 2: a JSON directory, then the raw arrays one after another (8-byte
    aligned): the TF matrix as CSR (``indptr``, ``indices``, TF ``counts``; when most are 1,
    only the others, by position), eids and keys as one UTF-8 text with offsets (not 4 bytes per character),
    timestamps, numeric entries and surrounding rows."""
    c = ix.chunk
    csr = c.tf_sq  # row-major, the same entries as TF: TF = sqrt(TF^2), exactly, for counts
    counts = np.sqrt(csr.data)
    if not (counts.size == 0 or (counts.max() < 65536 and np.array_equal(counts, np.rint(counts)))):
        csr = c.tf.tocsr()  # not counts: keep the values themselves
        csr.sort_indices()
        counts = csr.data
    elif counts.size:
        counts = counts.astype(np.uint8 if counts.max() < 256 else np.uint16)
    parts = _Parts()
    parts.add("indptr", csr.indptr.astype(np.int32 if csr.nnz < 2**31 else np.int64, copy=False))
    parts.add("indices", csr.indices.astype(np.uint16 if csr.shape[1] <= 65536 else np.int32, copy=False))
    other = np.flatnonzero(counts != 1) if counts.dtype.kind == "u" else None
    if other is None or other.shape[0] * 6 > counts.shape[0]:
        parts.add("counts", counts)
    else:  # mostly ones (a term once per context): only the other counts, by position
        parts.add("counts_at", other.astype(np.int32))
        parts.add("counts_of", counts[other].astype(np.uint16))
    parts.add("ts", np.asarray(c.ts, dtype=np.int64))
    parts.text("eids", c.eids)
    for attr, e in c.numeric.items():
        parts.add(f"num_rows:{attr}", np.asarray(e.rows))
        parts.add(f"num_values:{attr}", np.asarray(e.values))
        parts.add(f"num_tf:{attr}", np.asarray(e.tf))
    for attr, v in ix.keys.items():
        parts.text(f"key:{attr}", v)
    sur = ix.surrounding
    if len(sur):
        parts.add("sur_ts", pd.to_datetime(sur["ts"], utc=True).to_numpy(dtype="datetime64[ns]").astype(np.int64))
        for col in ("eid", "attr", "value", "part"):
            parts.text(f"sur_{col}", sur[col].to_numpy(dtype=object))
    head = {"shape": [int(x) for x in csr.shape], "contexts": int(ix.contexts), "arrays": parts.dir}
    payload = parts.payload(json.dumps(head, separators=(",", ":")).encode())
    return _HEAD.pack(MAGIC, VERSION, zlib.crc32(payload)) + payload


class _Parts:
    def __init__(self) -> None:
        self.dir: list[list] = []
        self.bufs: list[bytes | memoryview] = []
        self.at = 0

    def add(self, name: str, a: np.ndarray) -> None:
        a = np.ascontiguousarray(a)
        if a.dtype == object or a.dtype.kind in "UOSV":
            raise SimilarityError(f"index array {name!r} must be numeric, got {a.dtype}")
        pad = -self.at % 8
        if pad:
            self.bufs.append(b"\0" * pad)
            self.at += pad
        self.dir.append([name, a.dtype.str, list(a.shape), self.at])
        self.bufs.append(memoryview(a).cast("B"))
        self.at += a.nbytes

    def text(self, name: str, values) -> None:
        """Strings (or None) as one UTF-8 text, offsets in characters and a null mask."""
        arr = np.asarray(values, dtype=object)
        null = np.asarray(pd.isnull(arr), dtype=np.bool_) if arr.shape[0] else np.zeros(0, dtype=np.bool_)
        strs = arr.tolist()
        if null.any():
            strs = ["" if v is None or n else v for v, n in zip(strs, null.tolist(), strict=True)]
        try:
            joined = "".join(strs)
        except TypeError:  # not all str: their text
            strs = [str(v) for v in strs]
            joined = "".join(strs)
        lengths = np.fromiter(map(len, strs), dtype=np.int64, count=len(strs))
        offsets = np.zeros(len(strs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        self.add(f"{name}#off", offsets.astype(np.int32) if offsets[-1] < 2**31 else offsets)
        self.add(f"{name}#utf8", np.frombuffer(joined.encode("utf-8"), dtype=np.uint8))
        self.add(f"{name}#null", null)

    def payload(self, head: bytes) -> bytes:
        return b"".join([_LEN.pack(len(head)), head, *self.bufs])


def decode(blob: bytes) -> ChunkIndex:
    blob = bytes(blob)
    if len(blob) < _HEAD.size:
        raise CorruptIndex("not a chunk index (bad magic or truncated)")
    magic, version, crc = _HEAD.unpack_from(blob)
    if magic != MAGIC:
        raise CorruptIndex("not a chunk index (bad magic or truncated)")
    if version not in (1, VERSION):
        raise CorruptIndex(f"chunk index format {version} is not supported (this code reads 1 and {VERSION})")
    payload = memoryview(blob)[_HEAD.size:]
    if zlib.crc32(payload) != crc:
        raise CorruptIndex("chunk index checksum mismatch (altered or truncated)")
    try:
        return _decode_v1(bytes(payload)) if version == 1 else _decode_v2(payload)
    except CorruptIndex:
        raise
    except Exception as exc:  # a payload that passed the checksum but does not parse
        raise CorruptIndex(f"chunk index does not parse: {type(exc).__name__}: {exc}") from exc


def _decode_v2(payload: memoryview) -> ChunkIndex:
    (hlen,) = _LEN.unpack_from(payload)
    head = json.loads(bytes(payload[_LEN.size:_LEN.size + hlen]))
    body = payload[_LEN.size + hlen:]
    z: dict[str, np.ndarray] = {}
    for name, dtype, shape, at in head["arrays"]:
        dt = np.dtype(dtype)
        count = int(np.prod(shape)) if shape else 1
        if at < 0 or at + count * dt.itemsize > len(body):
            raise CorruptIndex(f"array {name!r} lies outside the blob")
        z[name] = np.frombuffer(body, dtype=dt, count=count, offset=at).reshape(shape)
    shape = tuple(head["shape"])
    indices = z["indices"].astype(np.int32)
    if "counts" in z:
        data = z["counts"].astype(np.float64)
    else:
        data = np.ones(indices.shape[0])
        data[z["counts_at"]] = z["counts_of"]
    tf = sp.csr_matrix((data, indices, z["indptr"].astype(np.int64)), shape=shape)
    tf.has_sorted_indices = True  # written from a canonical CSR (checked by scipy's own format check below)
    tf.check_format(full_check=False)
    numeric = {k.split(":", 1)[1]: NumericEntries(z[k].copy(), z["num_values:" + k.split(":", 1)[1]].copy(),
                                                   z["num_tf:" + k.split(":", 1)[1]].copy())
               for k in z if k.startswith("num_rows:")}
    chunk = ContextChunk.from_tf(_text_of(z, "eids"), z["ts"].astype("datetime64[ns]"), tf, numeric)
    keys = {k[len("key:"):-len("#off")]: _text_of(z, k[:-len("#off")]) for k in z
            if k.startswith("key:") and k.endswith("#off")}
    if "sur_ts" in z:
        sur = pd.DataFrame({c: _text_of(z, f"sur_{c}") for c in ("eid", "attr", "value", "part")})
        sur.insert(1, "ts", pd.to_datetime(z["sur_ts"], utc=True))
    else:
        sur = pd.DataFrame(columns=list(ROW_COLUMNS))
    return ChunkIndex(chunk, keys, sur[list(ROW_COLUMNS)], contexts=int(head["contexts"]))


def _text_of(z: dict[str, np.ndarray], name: str) -> np.ndarray:
    """An object array of str / None from its UTF-8 text, character offsets and null mask."""
    offsets, raw, null = z[f"{name}#off"].astype(np.int64), z[f"{name}#utf8"], z[f"{name}#null"]
    text = raw.tobytes().decode("utf-8")
    n = offsets.shape[0] - 1
    if n != null.shape[0] or (n and (offsets[0] != 0 or offsets[-1] != len(text) or (np.diff(offsets) < 0).any())):
        raise CorruptIndex(f"text column {name!r} has inconsistent offsets")
    bounds = offsets.tolist()
    out = np.empty(n, dtype=object)
    out[:] = [text[i:j] for i, j in zip(bounds[:-1], bounds[1:], strict=True)]
    if null.any():
        out[null] = None
    return out


def _text(a) -> tuple[np.ndarray, np.ndarray]:
    """Object array of str/None as (unicode array, null mask) (format version 1)."""
    arr = np.asarray(a, dtype=object)
    null = np.asarray(arr == None, dtype=bool) if arr.shape[0] else np.zeros(0, dtype=bool)  # noqa: E711 (elementwise)
    return np.where(null, "", arr).astype(str), null


def _decode_v1(payload: bytes) -> ChunkIndex:
    """Format version 1 (an ``.npz`` payload), still read so older indexes are not rebuilt."""
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


def _untext(values: np.ndarray, null: np.ndarray) -> np.ndarray:
    out = values.astype(object)
    out[null] = None
    return out
