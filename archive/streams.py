"""Registered streams: name, event-time column, payload schema, indexes, retention."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from archive.names import check_column_name, check_stream_name
from archive.types import ColumnType, parse_type


class Retention(StrEnum):
    """What happens to expired source tuples in old chunks (M 4.1, A 5.1)."""

    KEEP_ALL = "keep_all"
    CONTRIBUTING_ONLY = "contributing_only"  # keep tuples with >= 1 provenance edge
    DROP_AFTER_N_OLD_CHUNKS = "drop_after_n_old_chunks"


@dataclass(frozen=True)
class RetentionPolicy:
    policy: Retention = Retention.KEEP_ALL
    n: int | None = None

    def __post_init__(self) -> None:
        if self.policy is Retention.DROP_AFTER_N_OLD_CHUNKS and (self.n is None or self.n < 0):
            raise ValueError(f"retention drop_after_n_old_chunks needs n >= 0, got {self.n!r}")

    def to_json(self) -> dict:
        return {"policy": self.policy.value, "n": self.n}

    @classmethod
    def from_json(cls, d: dict) -> RetentionPolicy:
        return cls(Retention(d.get("policy", "keep_all")), d.get("n"))


@dataclass(frozen=True)
class StreamSpec:
    """An archived stream. ``columns`` is the payload (event time excluded), in order.
    ``indexes`` lists column tuples indexed on recent chunks."""

    name: str
    ts_col: str
    columns: dict[str, ColumnType]
    kind: str = "raw"
    indexes: tuple[tuple[str, ...], ...] = ()
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)

    @classmethod
    def build(cls, name: str, ts_col: str, columns: dict[str, str | ColumnType], kind: str = "raw",
              indexes=(), retention: RetentionPolicy | None = None) -> StreamSpec:
        check_stream_name(name)
        check_column_name(ts_col, name)
        cols = {}
        for col, t in columns.items():
            check_column_name(col, name)
            if col == ts_col:
                continue
            cols[col] = t if isinstance(t, ColumnType) else parse_type(t, f"stream {name!r} column {col!r}")
        idx = []
        for ix in indexes:
            ix = (ix,) if isinstance(ix, str) else tuple(ix)
            for c in ix:
                if c != ts_col and c not in cols:
                    raise ValueError(f"index {list(ix)} of stream {name!r} names unknown column {c!r}")
            idx.append(ix)
        return cls(name, ts_col, cols, kind, tuple(idx), retention or RetentionPolicy())

    @property
    def id_columns(self) -> list[tuple[str, ColumnType]]:
        """Columns hashed into the source id: event time, then payload in order."""
        return [(self.ts_col, ColumnType.TIMESTAMPTZ), *self.columns.items()]

    @property
    def stored_columns(self) -> list[tuple[str, ColumnType]]:
        """Columns of an archived row as written: source id, batch id, then :attr:`id_columns`."""
        return [("_sid", ColumnType.BIGINT), ("_batch", ColumnType.BIGINT), *self.id_columns]
