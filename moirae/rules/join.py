"""A Recall's output joined with a live stream (M 4.6, figs. 10 and 12).

Each output row of the Recall (new rows and revisions alike) is joined by key with the
live stream's rows through :class:`recall.revision_ops.RevisionJoin`:

- *event analysis*: with the stream's row valid at the alert's time (the latest at or
  before it, within ``validity``): a revision joins as if time had stopped at the alert;
- *present analysis*: with the stream's newest row, and every newer row revises the
  joined rows of the alerts still open (their recall running).

The live stream is an archived stream (a source); its rows are read from the archive as
they are archived (:class:`StreamFeed`), newest seen first not re-read. Before each
Recall output is joined, the feed catches up, so an output never misses a row archived
before it. Rows archived later than their time by more than the feed has already read
past (late rows) are not seen.

The join's outputs are the rule's outputs: stored with the recall results and published
on the bus under the rule's name, so ``GET /api/events/{eid}`` shows them with their
revisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd

from archive.names import quote
from recall.api import Output
from recall.revision_ops import RevisionJoin

FAR = datetime(9999, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class JoinRule:
    """Join Recall ``recall``'s output (of ``event``'s alerts) with archived stream
    ``stream`` on ``on`` (a column, or ``(recall column, stream column)``)."""

    name: str
    event: str
    recall: str
    stream: str
    on: str | tuple[str, str]
    analysis: str = "event"
    validity: timedelta | None = None
    lookback: timedelta = timedelta(hours=1)


class StreamFeed:
    """Reads an archived stream's rows as they arrive, in time order, each once."""

    def __init__(self, archiver, stream: str, lookback: timedelta) -> None:
        self.archiver = archiver
        self.stream = stream
        self.ts_col = archiver.stream(stream).ts_col
        self.lookback = lookback
        self.last: datetime | None = None
        self._seen_at_last: set[int] = set()

    def poll(self) -> list[dict[str, Any]]:
        """The rows archived since the last poll (the first: the last ``lookback`` of
        the stream before its newest row)."""
        if self.last is None:
            newest = self._newest()
            if newest is None:
                return []
            start = newest - self.lookback
        else:
            start = self.last
        frame = self.archiver.read(self.stream, start, FAR, with_ids=True)
        if frame.empty:
            return []
        frame = frame.sort_values(self.ts_col, kind="stable")
        ts = pd.to_datetime(frame[self.ts_col], utc=True)
        ids = frame["_sid"].tolist() if "_sid" in frame.columns else [None] * len(frame)
        rows = []
        newest = ts.max().to_pydatetime()
        for (_, r), t, sid in zip(frame.iterrows(), ts, ids, strict=True):
            t = t.to_pydatetime()
            if self.last is not None and t == self.last and sid in self._seen_at_last:
                continue
            row = {c: v for c, v in r.items() if not str(c).startswith("_")}
            row[self.ts_col] = t
            rows.append(row)
        self._seen_at_last = {sid for t, sid in zip(ts, ids, strict=True) if t.to_pydatetime() == newest} | (
            self._seen_at_last if newest == self.last else set())
        self.last = newest
        return rows

    def _newest(self) -> datetime | None:
        with self.archiver.db.connection() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT max({quote(self.ts_col)}) FROM {quote(self.stream)}")
            return cur.fetchone()[0]


class JoinRunner:
    """One :class:`JoinRule` at work: its join operator and its live feed."""

    def __init__(self, rule: JoinRule, archiver) -> None:
        self.rule = rule
        self.feed = StreamFeed(archiver, rule.stream, rule.validity or rule.lookback)
        self.op = RevisionJoin(rule.name, rule.on, analysis=rule.analysis, other_ts=self.feed.ts_col,
                               validity=rule.validity)

    def catch_up(self) -> list[Output]:
        """Feed the stream's new rows; returns the joined rows they insert or revise."""
        out: list[Output] = []
        for row in self.feed.poll():
            out += self.op.on_other(row)
        return out

    def on_output(self, out: Output) -> list[Output]:
        """One output of the rule's Recall, after the feed caught up."""
        if out.operator != self.rule.recall:
            return []
        return [*self.catch_up(), *self.op.on_output(out)]
