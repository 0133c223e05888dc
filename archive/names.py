"""SQL identifiers for streams, partitions and indexes.

Stream names become table names, so they are restricted to lower-case SQL identifiers;
every identifier that reaches SQL text goes through :func:`quote` after validation.

>>> partition_name("metrics", 42)
'metrics__c42'
>>> partition_name("metrics", -3)
'metrics__cm3'
>>> check_stream_name("Bad-Name")
Traceback (most recent call last):
...
archive.errors.BadName: stream name must match [a-z][a-z0-9_]{0,39} (got 'Bad-Name')
"""

from __future__ import annotations

import re

from archive.errors import BadName

_STREAM = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_COLUMN = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
RESERVED_COLUMNS = ("_sid", "_batch")


def check_stream_name(name: str) -> str:
    if not isinstance(name, str) or not _STREAM.match(name) or "__" in name:
        raise BadName(f"stream name must match [a-z][a-z0-9_]{{0,39}} (got {name!r})")
    return name


def check_column_name(name: str, stream: str) -> str:
    if not isinstance(name, str) or not _COLUMN.match(name):
        raise BadName(f"column {name!r} of stream {stream!r} must be a lower-case SQL identifier")
    if name in RESERVED_COLUMNS:
        raise BadName(f"column {name!r} of stream {stream!r} is reserved by the archive")
    return name


def quote(ident: str) -> str:
    """Double-quote an identifier that has already been validated."""
    if '"' in ident:
        raise BadName(f"identifier {ident!r} contains a double quote")
    return f'"{ident}"'


def partition_name(stream: str, chunk_id: int) -> str:
    return f"{stream}__c{chunk_id}" if chunk_id >= 0 else f"{stream}__cm{-chunk_id}"


def stage_name(stream: str) -> str:
    """Where a shared read stages its stream's first batch (archive.shared); stream names
    hold no ``__``, so it meets no stream.

    >>> stage_name("metrics")
    'metrics__stage'
    """
    return f"{stream}__stage"


def index_name(stream: str, chunk_id: int, n: int) -> str:
    return f"{partition_name(stream, chunk_id)}__ix{n}"
