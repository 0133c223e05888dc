"""Tokens of MATCH_RECOGNIZE text, each with its line and column (docs/PATTERNS.md).

>>> [t.text for t in tokenize("A{2,} | B? -- note")][:-1]
['A', '{', '2', ',', '}', '|', 'B', '?']
>>> tokenize("x <= 'it''s'")[2].value
"it's"
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: kinds: ident, number, string, op, end
_TOKEN = re.compile(
    r"""(?P<space>\s+|--[^\n]*|/\*.*?\*/)
      |(?P<number>\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)
      |(?P<string>'(?:[^']|'')*')
      |(?P<quoted>"(?:[^"]|"")*"|`[^`]*`)
      |(?P<ident>[A-Za-z_][A-Za-z0-9_$]*)
      |(?P<op><>|!=|<=|>=|\|\||[(){}\[\],.*+?|\-/%=<>#@!;^$])
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class Token:
    """One token: ``kind`` (ident, number, string, op, end), its text, value and position."""

    kind: str
    text: str
    value: object
    line: int
    col: int

    def is_word(self, *words: str) -> bool:
        """Whether this is an unquoted identifier equal (case-insensitively) to one of ``words``."""
        return self.kind == "ident" and self.text.upper() in words

    def is_op(self, *ops: str) -> bool:
        """Whether this is one of the operator tokens ``ops``."""
        return self.kind == "op" and self.text in ops


class LexError(Exception):
    """A character no token starts with (at ``line``, ``col``); the parser names the pattern."""

    def __init__(self, line: int, col: int, char: str):
        super().__init__(f"unexpected character {char!r}")
        self.line, self.col = line, col


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, ending with one ``end`` token; raise :class:`LexError`."""
    out: list[Token] = []
    pos, line, line_start = 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise LexError(line, pos - line_start + 1, text[pos])
        kind = m.lastgroup or "space"
        chunk = m.group()
        if kind != "space":
            value: object = chunk
            if kind == "number":
                value = float(chunk) if any(c in chunk for c in ".eE") else int(chunk)
            elif kind == "string":
                value = chunk[1:-1].replace("''", "'")
            elif kind == "quoted":
                kind, value = "qident", chunk[1:-1].replace('""', '"')
            out.append(Token(kind, chunk if kind != "qident" else str(value), value, line, pos - line_start + 1))
        newlines = chunk.count("\n")
        if newlines:
            line += newlines
            line_start = pos + chunk.rindex("\n") + 1
        pos = m.end()
    out.append(Token("end", "", None, line, pos - line_start + 1))
    return out


__all__ = ["LexError", "Token", "tokenize"]
