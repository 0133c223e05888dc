"""Recall: history-queries over the archive, run chunk by chunk, newest first (M 4.3-4.6).

The public surface, imported lazily (``import recall`` loads neither pandas, sqlglot
nor psycopg2):

- the extension point (:mod:`recall.abc`): :class:`OperatorSpec` builds a
  :class:`RecallOperator` (optionally a :class:`ChunkFetcher`, :class:`Snapshotting`);
- the standard operators: :class:`RecallSpec` -> :class:`Recall` (M 3.2, 4.5.1) and
  :class:`SimilarityRecallSpec` -> :class:`SimilarityRecall` (M 3.4, 4.5.2);
- :class:`RecallManager`, which runs their tasks through a
  :class:`scheduler.SchedulingPolicy` (M 4.4);
- the outputs (:mod:`recall.api`, :mod:`recall.outputs`): :class:`Output`,
  :class:`OutputKind`, :class:`EndReason`, :class:`Interval`, :class:`TaskSpec`,
  :class:`TaskView`, the :class:`Bus` and the :class:`StoredOutputs`;
- the errors (:mod:`recall.errors`), rooted at :class:`RecallError`.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "ChunkFetcher": "recall.abc", "OperatorSpec": "recall.abc", "RecallOperator": "recall.abc",
    "Snapshotting": "recall.abc",
    "EndReason": "recall.api", "Interval": "recall.api", "Output": "recall.api", "OutputKind": "recall.api",
    "TaskSpec": "recall.api",
    "BadTemplate": "recall.errors", "DuplicateOperator": "recall.errors", "ManagerClosed": "recall.errors",
    "RecallError": "recall.errors", "RecallManagerError": "recall.errors", "RevisionError": "recall.errors",
    "SimilarityRecallError": "recall.errors", "UnknownEventAttribute": "recall.errors",
    "UnknownOperator": "recall.errors", "UnsupportedAggregate": "recall.errors",
    "RecallManager": "recall.manager",
    "Recall": "recall.operator",
    "Bus": "recall.outputs", "StoredOutputs": "recall.outputs",
    "SimilarityRecall": "recall.similarity_recall",
    "NoveltySpec": "recall.specs", "RecallSpec": "recall.specs", "SimilarityRecallSpec": "recall.specs",
    "TaskStatus": "recall.task", "TaskView": "recall.task",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    try:
        module = _WHERE[name]
    except KeyError:
        raise AttributeError(f"module 'recall' has no attribute {name!r}") from None
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
