"""A cursor over tokens that raises one-line, positioned pattern errors (docs/PATTERNS.md)."""

from __future__ import annotations

from moirae.patterns.errors import PatternSyntaxError, at
from moirae.patterns.lexer import LexError, Token, tokenize


class Cursor:
    """The tokens of one pattern's text, read left to right; errors name ``name`` and the position."""

    def __init__(self, text: str, name: str):
        self.name = name
        try:
            self.tokens = tokenize(text)
        except LexError as e:
            raise PatternSyntaxError(at(name, e.line, e.col, str(e))) from None
        self.i = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def next(self) -> Token:
        t = self.tokens[self.i]
        if t.kind != "end":
            self.i += 1
        return t

    def fail(self, message: str, tok: Token | None = None, error: type = PatternSyntaxError) -> Exception:
        t = tok or self.tok
        return error(at(self.name, t.line, t.col, message))

    def _shown(self, t: Token) -> str:
        return "end of text" if t.kind == "end" else repr(t.text)

    def expect_op(self, op: str) -> Token:
        if not self.tok.is_op(op):
            raise self.fail(f"expected {op!r}, found {self._shown(self.tok)}")
        return self.next()

    def expect_word(self, *words: str) -> Token:
        if not self.tok.is_word(*words):
            raise self.fail(f"expected {' '.join(words)}, found {self._shown(self.tok)}")
        return self.next()

    def accept_word(self, *words: str) -> Token | None:
        return self.next() if self.tok.is_word(*words) else None

    def accept_op(self, *ops: str) -> Token | None:
        return self.next() if self.tok.is_op(*ops) else None

    def ident(self, what: str = "a name") -> Token:
        if self.tok.kind not in ("ident", "qident"):
            raise self.fail(f"expected {what}, found {self._shown(self.tok)}")
        return self.next()

    def integer(self, what: str = "an integer") -> int:
        t = self.tok
        if t.kind != "number" or not isinstance(t.value, int):
            raise self.fail(f"expected {what}, found {self._shown(t)}")
        self.next()
        return int(t.value)


__all__ = ["Cursor"]
