"""Secrets out of text: every form a PostgreSQL DSN (or a token) can take is redacted
before the text reaches a terminal, a log file, a table or an HTTP answer.

:func:`redact` replaces the secret with ``***`` and keeps everything else, so the
message still says which server and user were meant. It recognises:

- URLs: ``postgresql://user:secret@host/db`` (any scheme; the password ends at the last
  ``@`` of the authority) and ``?password=secret`` / ``&sslpassword=secret`` query
  parameters;
- libpq keyword strings: ``password=secret``, ``password = 'a b\\'c'`` (single-quoted
  with backslash escapes), ``sslpassword=...``, any case;
- environment-like assignments and mappings: ``PGPASSWORD=secret``,
  ``MOIRAE_API_TOKEN=secret``, ``'password': 'secret'``, ``"token": "secret"``;
- bearer credentials: ``Authorization: Bearer secret``, or ``Bearer`` and a token-like
  word of 16 characters or more.

Stdlib only (the bottom layer). Idempotent: redacting twice changes nothing more.

>>> redact("cannot connect to postgresql://moirae:hunter2@db:5432/m")
'cannot connect to postgresql://moirae:***@db:5432/m'
>>> redact("host=db user=u password='a b\\\\'c' dbname=m")
'host=db user=u password=*** dbname=m'
>>> redact("PGPASSWORD=hunter2 psql")
'PGPASSWORD=*** psql'
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

# libpq keyword value: single-quoted with backslash escapes, or a run of non-blanks
# (a backslash escapes the next character there too)
_KW_VALUE = r"(?:'(?:[^'\\]|\\.)*'?|(?:[^\s\\]|\\.)+)"
_SECRET_KEYS = r"(?:ssl)?password|passwd|pgpassword|moirae_api_token|api_token|token|secret|sslkey_?password"
_KEYWORD = re.compile(rf"(?i)(?<![\w.-])((?:[a-z_]*_)?(?:{_SECRET_KEYS})\s*=\s*)(?!\*\*\*(?:[\s&#'\"]|$))({_KW_VALUE})")
# the userinfo of a URL authority: scheme://user:password@ (the password runs to the last
# '@' before the path; it may contain ':' and, unencoded, even '@')
_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/?#@]*:)([^\s/?#]*)@")
_QUERY = re.compile(rf"(?i)([?&;](?:{_SECRET_KEYS})=)([^&\s#]*)")
_MAPPING = re.compile(rf"""(?i)(['"](?:[a-z_]*_)?(?:{_SECRET_KEYS})['"]\s*:\s*)('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
# a bearer credential: after "Authorization: Bearer", or a token-like run after "Bearer"
_BEARER = re.compile(r"(?i)(\bauthorization['\"]?\s*[:=]\s*['\"]?bearer\s+)([^\s'\"]+)"
                     r"|(\bBearer\s+)([A-Za-z0-9._~+/=-]{16,})")


def redact(text: Any) -> Any:
    """``text`` with every secret replaced by ``***`` (non-strings are returned as they are)."""
    if not isinstance(text, str) or not text:
        return text
    out = _URL.sub(lambda m: m.group(1) + MASK + "@", text)
    out = _QUERY.sub(lambda m: m.group(1) + MASK, out)
    out = _MAPPING.sub(lambda m: m.group(1) + m.group(2)[0] + MASK + m.group(2)[0], out)
    out = _KEYWORD.sub(lambda m: m.group(1) + MASK, out)
    return _BEARER.sub(lambda m: (m.group(1) or m.group(3)) + MASK, out)


def redact_all(value: Any) -> Any:
    """:func:`redact` over every string in a JSON-like value (dicts, lists, tuples), keys kept.

    >>> redact_all({"last_error": "password=x host=h", "n": 1})
    {'last_error': 'password=*** host=h', 'n': 1}
    """
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_all(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_all(v) for v in value)
    return value
