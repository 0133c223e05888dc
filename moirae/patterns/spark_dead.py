"""Dead letters of a live pattern: rows whose DEFINE cannot be evaluated (T 4).

A running pattern never takes its query down: the processor (on an executor) hands such
rows here, and they go to the archive's dead-letter table through the archive's one
path, :func:`archive.validate.insert_dead_letters`, with a reason naming the pattern, the
symbol and the error. The micro-batch id is the one Spark runs (the task's local
property), so a replayed batch finds its rows already recorded and adds nothing.

The writer is a small picklable value: it travels to the executors with the processor.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import date, datetime

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

#: Spark's local property holding the micro-batch id of a streaming task
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def jsonable(value):
    """A row value as JSON can hold it (times as ISO strings, numpy scalars as Python)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, pd.Timestamp | datetime | date):
        return value.isoformat()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple | np.ndarray):
        return [jsonable(v) for v in value]
    return value if isinstance(value, str | int | float | bool) else str(value)


def current_batch_id() -> int | None:
    """The streaming micro-batch id of the running Spark task, if any."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        value = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        return int(value) if value is not None else None
    except Exception:  # noqa: BLE001 - outside a task (a driver-side test): no batch id
        return None


@dataclass(frozen=True)
class DeadLetterWriter:
    """Writes dead rows of ``stream`` into the archive at ``dsn`` (schema ``schema``)."""

    dsn: str
    schema: str | None
    stream: str

    def write(self, batch_id: int | None, dead: list[tuple[dict, str]]) -> int:
        """Record ``dead`` (row, reason) pairs of ``batch_id`` once; returns how many were new."""
        from archive.pg import Database
        from archive.validate import DeadLetter, insert_dead_letters, storable_json

        letters = [DeadLetter(storable_json({k: jsonable(v) for k, v in row.items()}), reason)
                   for row, reason in dead]
        db = Database(self.dsn, self.schema)
        try:
            with db.connection(autocommit=False) as conn, conn.cursor() as cur:
                if batch_id is not None:  # a replayed batch: keep only what it has not recorded
                    cur.execute("SELECT row_data::text, reason FROM moirae_dead_letters "
                                "WHERE stream = %s AND batch_id = %s", (self.stream, batch_id))
                    seen = {(json.dumps(json.loads(r), sort_keys=True), why) for r, why in cur.fetchall()}
                    letters = [d for d in letters if (json.dumps(d.row, sort_keys=True), d.reason) not in seen]
                if letters:
                    insert_dead_letters(cur, self.stream, batch_id, letters)
        finally:
            db.close()
        return len(letters)
