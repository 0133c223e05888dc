"""XXH64, vectorised over numpy arrays, with a per-row seed.

Spark's ``xxhash64(c1, c2, ...)`` hashes each column with the previous column's hash as
the seed, so no value's hash can be cached across rows: the whole chain has to be
computed per row. Doing that with the C ``xxhash`` module costs a Python call per value;
here every step of the algorithm is one numpy operation over all rows. Inputs of 8 bytes (longs, doubles, timestamps),
4 bytes (booleans) and byte strings shorter than 32 bytes are vectorised; longer strings
fall back to the C module row by row (rare in monitoring data).

Arithmetic is modulo 2**64 (numpy's uint64 wraps); constants are XXH64's primes.
"""

from __future__ import annotations

import numpy as np
import xxhash

P1 = np.uint64(0x9E3779B185EBCA87)
P2 = np.uint64(0xC2B2AE3D27D4EB4F)
P3 = np.uint64(0x165667B19E3779F9)
P4 = np.uint64(0x85EBCA77C2B2AE63)
P5 = np.uint64(0x27D4EB2F165667C5)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _avalanche(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * P2
    h = h ^ (h >> np.uint64(29))
    h = h * P3
    return h ^ (h >> np.uint64(32))


def _lane8(h: np.ndarray, lane: np.ndarray) -> np.ndarray:
    k1 = _rotl(lane * P2, 31) * P1
    return _rotl(h ^ k1, 27) * P1 + P4


def _lane4(h: np.ndarray, lane: np.ndarray) -> np.ndarray:
    return _rotl(h ^ (lane * P1), 23) * P2 + P3


def _byte(h: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _rotl(h ^ (b * P5), 11) * P1


def hash8(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """XXH64 of each 8-byte little-endian value (uint64 view) with its row's seed."""
    with np.errstate(over="ignore"):
        h = seeds + P5 + np.uint64(8)
        return _avalanche(_lane8(h, values.astype(np.uint64, copy=False)))


def hash4(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """XXH64 of each 4-byte little-endian value (uint32) with its row's seed."""
    with np.errstate(over="ignore"):
        h = seeds + P5 + np.uint64(4)
        return _avalanche(_lane4(h, values.astype(np.uint64)))


def hash_bytes(data: list[bytes], seeds: np.ndarray) -> np.ndarray:
    """XXH64 of each byte string with its row's seed."""
    uniques = list(dict.fromkeys(data))
    index = {b: k for k, b in enumerate(uniques)}
    codes = np.fromiter((index[b] for b in data), dtype=np.int64, count=len(data))
    return hash_coded(codes, uniques, seeds)


def hash_coded(codes: np.ndarray, uniques: list[bytes], seeds: np.ndarray) -> np.ndarray:
    """XXH64 of ``uniques[codes[i]]`` with seed ``seeds[i]``: strings given once each
    (a factorized column), so the bytes are laid out per distinct value, not per row."""
    out = np.empty(len(codes), dtype=np.uint64)
    lengths = np.array([len(b) for b in uniques], dtype=np.int64)
    row_len = lengths[codes] if len(codes) else np.empty(0, dtype=np.int64)
    for length in np.unique(lengths):
        rows = np.flatnonzero(row_len == length)
        if not len(rows):
            continue
        if length >= 32:
            for r in rows:
                out[r] = xxhash.xxh64_intdigest(uniques[codes[r]], int(seeds[r]))
            continue
        members = np.flatnonzero(lengths == length)
        table = np.frombuffer(b"".join(uniques[m] for m in members), dtype=np.uint8).reshape(len(members), length)
        slot = np.full(len(uniques), -1, dtype=np.int64)
        slot[members] = np.arange(len(members))
        out[rows] = _short(table[slot[codes[rows]]], seeds[rows])
    return out


def _short(buf: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """XXH64 of equal-length inputs shorter than 32 bytes (rows of ``buf``)."""
    n = buf.shape[1]
    with np.errstate(over="ignore"):
        h = seeds + P5 + np.uint64(n)
        i = 0
        while i + 8 <= n:
            h = _lane8(h, np.ascontiguousarray(buf[:, i:i + 8]).view("<u8").ravel().astype(np.uint64))
            i += 8
        if i + 4 <= n:
            h = _lane4(h, np.ascontiguousarray(buf[:, i:i + 4]).view("<u4").ravel().astype(np.uint64))
            i += 4
        while i < n:
            h = _byte(h, buf[:, i].astype(np.uint64))
            i += 1
        return _avalanche(h)
