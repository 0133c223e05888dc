"""Hypothesis strategies shared by the similarity tests (a small vocabulary, so terms
repeat across contexts and scores tie often)."""

from __future__ import annotations

from hypothesis import strategies as st

ATTRS = ("user", "proc", "host")
VALUES = ("a", "b", "c", "d", "e", "f")

row = st.dictionaries(st.sampled_from(ATTRS), st.sampled_from(VALUES) | st.none(), max_size=3)
context = st.lists(row, max_size=5)
contexts = st.lists(context, min_size=1, max_size=30)
