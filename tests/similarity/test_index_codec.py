"""The persisted chunk index format (similarity/index_codec.py): what is decoded equals
what was encoded, for every part of a chunk index, and damage is refused."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pandas as pd
import pytest

from similarity.config import NumericSpec, SimilarityConfig
from similarity.index import build
from similarity.index_codec import CorruptIndex, decode, encode
from similarity.vocabulary import Vocabulary


def _index():
    ts = pd.Timestamp("2024-01-01 10:00:00.000001", tz="UTC")
    rows = pd.DataFrame([
        ("e1", ts, None, "h1", "event"), ("e1", ts, "user", "ünï", "context:c"), ("e1", ts, "user", "ünï", "context:c"),
        ("e1", ts, "load", "0.5", "context:c"), ("e2", ts, None, None, "event"), ("e2", ts, "user", "", "context:c"),
        ("e2", ts, "proc", "a\tb\\N", "context:c"), ("e2", ts, "load", "2", "context:c"),
        ("e2", ts, "resolution", "reboot", "surrounding:r"), ("e1", ts, "resolution", None, "surrounding:r"),
        ("e3", ts, None, "h€", "event"),
    ], columns=["eid", "ts", "attr", "value", "part"])
    return build(rows, Vocabulary(), SimilarityConfig(numeric={"load": NumericSpec()}))


def test_every_part_of_an_index_comes_back():
    ix = _index()
    back = decode(encode(ix))
    a, b = ix.chunk, back.chunk
    assert list(b.eids) == list(a.eids) == ["e1", "e2", "e3"]
    assert np.array_equal(b.ts, a.ts)
    assert (b.tf != a.tf).nnz == 0 and (b.tf_sq != a.tf_sq).nnz == 0 and b.tf.shape == a.tf.shape
    assert a.tf.max() == 2  # a count other than 1 survives
    assert set(b.numeric) == {"load"}
    for f in ("rows", "values", "tf"):
        assert np.array_equal(getattr(b.numeric["load"], f), getattr(a.numeric["load"], f))
    assert back.keys["key"].tolist() == ["h1", None, "h€"]
    pd.testing.assert_frame_equal(back.surrounding, ix.surrounding, check_dtype=False)
    assert back.contexts == ix.contexts


def test_an_empty_chunk_comes_back():
    ix = build(pd.DataFrame(columns=["eid", "ts", "attr", "value", "part"]), Vocabulary())
    back = decode(encode(ix))
    assert back.n == 0 and back.chunk.tf.shape == ix.chunk.tf.shape


def test_damage_is_refused():
    blob = encode(_index())
    with pytest.raises(CorruptIndex, match="checksum"):
        decode(blob[:-3] + b"xyz")
    with pytest.raises(CorruptIndex, match="bad magic"):
        decode(b"XXXX" + blob[4:])
    with pytest.raises(CorruptIndex, match="format 9"):
        decode(blob[:4] + bytes([9]) + blob[5:])
    # a directory pointing outside the payload, with a valid checksum
    payload = blob[9:]
    (hlen,) = struct.unpack_from("<I", payload)
    head = payload[4:4 + hlen].replace(b'"indices","<u2",[', b'"indices","<u2",[9999')
    payload = struct.pack("<I", len(head)) + head + payload[4 + hlen:]
    with pytest.raises(CorruptIndex):
        decode(blob[:5] + struct.pack("<I", zlib.crc32(payload)) + payload)


def test_counts_other_than_one_come_back_when_most_are_one():
    ts = pd.Timestamp("2024-01-01", tz="UTC")
    rows = [(f"e{i}", ts, None, f"h{i}", "event") for i in range(12)]
    rows += [(f"e{i}", ts, a, f"{a}{i}", "context:c") for i in range(12) for a in ("user", "proc")]
    rows += [("e3", ts, "user", "user3", "context:c"), ("e7", ts, "proc", "proc7", "context:c")] * 2
    ix = build(pd.DataFrame(rows, columns=["eid", "ts", "attr", "value", "part"]), Vocabulary())
    assert sorted(ix.chunk.tf.data.tolist()).count(1.0) == 22  # two counts of 3 among 24 entries
    back = decode(encode(ix))
    assert (back.chunk.tf != ix.chunk.tf).nnz == 0 and (back.chunk.tf_sq != ix.chunk.tf_sq).nnz == 0
