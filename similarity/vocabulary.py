"""The growing vocabulary: term -> column index (M 3.5).

Columns are assigned in order of first sight and never change or disappear, so a chunk
matrix built with an older, smaller vocabulary stays valid: its columns are a prefix of
today's. Appending is the only mutation.

>>> v = Vocabulary()
>>> v.add("user=u1"), v.add("proc=p1"), v.add("user=u1")
(0, 1, 0)
>>> v.index("proc=p1"), v.index("nope"), len(v)
(1, None, 2)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class Vocabulary:
    """Append-only mapping term -> column."""

    def __init__(self, terms: Iterable[str] = ()) -> None:
        self._terms: list[str] = []
        self._index: dict[str, int] = {}
        self._by_attr: dict[str, dict[str, int]] = {}  # attr -> value -> column (add_values)
        for t in terms:
            self.add(t)

    def add(self, term: str) -> int:
        col = self._index.get(term)
        if col is None:
            col = len(self._terms)
            self._index[term] = col
            self._terms.append(term)
        return col

    def add_many(self, terms: Iterable[str]) -> list[int]:
        """:meth:`add` of each term, in order (one dictionary probe per known term)."""
        terms = list(terms)
        cols = list(map(self._index.get, terms))
        for i, col in enumerate(cols):
            if col is None:
                cols[i] = self.add(terms[i])
        return cols  # type: ignore[return-value]

    def add_values(self, attr: str, values: Sequence[str]) -> list[int]:
        """:meth:`add` of each term ``attr=value``, in order; each value's column is
        remembered per attribute, so a value seen before costs one dictionary probe and
        no string is built for it (a chunk index build asks for thousands at once).

        >>> v = Vocabulary(["u=b"])
        >>> v.add_values("u", ["a", "b", "a"]), v.terms()
        ([1, 0, 1], ['u=b', 'u=a'])
        """
        memo = self._by_attr.setdefault(attr, {})
        cols = list(map(memo.get, values))
        for i, col in enumerate(cols):
            if col is None:
                col = cols[i] = memo[values[i]] = self.add(f"{attr}={values[i]}")
        return cols  # type: ignore[return-value]

    def index(self, term: str) -> int | None:
        return self._index.get(term)

    def term(self, col: int) -> str:
        return self._terms[col]

    def terms(self) -> list[str]:
        return list(self._terms)

    def __len__(self) -> int:
        return len(self._terms)

    def __contains__(self, term: object) -> bool:
        return term in self._index
