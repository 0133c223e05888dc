"""The recall operator: the extension point of recall (M 3.2, 3.4, 4.3-4.6, fig. 9).

A recall operator comes in two parts, as a Bytewax ``Clock`` builds its ``ClockLogic``:

- an :class:`OperatorSpec`: a frozen, comparable description of what was deployed
  (its name, template, bounds, tickets...). ``spec.build(store)`` makes
- the :class:`RecallOperator` logic the Recall Manager drives: ``task_for(event)``
  makes a task's :class:`~recall.api.TaskSpec`; ``start`` makes the per-task state;
  ``on_chunk`` consumes one chunk (newest first, M 4.3) and answers with outputs (new
  tuples and revisions, M 4.6); ``on_end`` answers with the final outputs. The manager
  never looks inside the state and publishes the event's boundary itself.

Three optional capabilities, declared here instead of probed:

- :class:`ChunkFetcher`: an operator that reads a chunk itself (Similarity Recall reads
  its per-chunk index) instead of the manager running its history-query;
- :class:`ChunkRunFetcher`: a chunk fetcher that may read a run of consecutive chunks
  in one quantum, as one (Similarity Recall merges small chunks whose indexes are in
  memory: thousands of one-hour chunks of a few events each would otherwise cost a
  quantum, a scoring pass and a set of revisions each);
- :class:`Snapshotting`: an operator with learned state that outlives tasks
  (statistics); ``snapshot()`` is JSON-able apart from documented values and carries a
  version that ``restore`` checks.

Every operator keeps the contract tests/recall/test_operator_conformance.py checks:
the same chunks give the same outputs; ``seq`` increases per (operator, event); the
history an output is computed from grows backwards in time as chunks arrive newest first;
a snapshot restores to an equal snapshot.

Standard operators: :class:`recall.specs.RecallSpec` builds :class:`recall.operator.Recall`;
:class:`recall.specs.SimilarityRecallSpec` builds
:class:`recall.similarity_recall.SimilarityRecall`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pandas is heavy; only the annotations need it
    import pandas as pd

    from archive.abc import ChunkStore
    from recall.api import EndReason, Interval, Output, TaskSpec


@runtime_checkable
class RecallOperator(Protocol):
    """A Recall or Similarity Recall operator's logic, as the manager sees it.

    ``start`` makes per-task state (returned to the operator on every call), ``on_chunk``
    consumes one chunk's rows and returns outputs, ``on_end`` returns final outputs
    (the manager then emits the event's boundary tuple once all its tasks have ended).
    ``on_chunk`` may run concurrently for different tasks, never for one task.
    """

    name: str

    def task_for(self, event: Mapping[str, Any]) -> TaskSpec: ...

    def start(self, spec: TaskSpec) -> Any: ...

    def on_chunk(self, state: Any, chunk_id: int, covered: Interval, rows: pd.DataFrame) -> list[Output]: ...

    def on_end(self, state: Any, reason: EndReason) -> list[Output]: ...


@runtime_checkable
class ChunkFetcher(Protocol):
    """An operator that reads each chunk itself; the manager hands ``on_chunk`` what
    ``fetch_chunk`` returns instead of the rows of the task's history-query."""

    def fetch_chunk(self, state: Any, chunk_id: int, conn: Any = None, timeout_ms: int | None = None) -> Any: ...


@runtime_checkable
class ChunkRunFetcher(Protocol):
    """A :class:`ChunkFetcher` that may read several of a task's next chunks in one
    quantum. ``chunk_ids`` are the task's next chunks, newest first (at least one, no
    more than the task may read before it suspends for feedback); the answer is how many
    of them, from the first, it read (at least 1) and what ``on_chunk`` is handed for
    them, once, as one chunk: its ``chunk_id`` is the oldest of them and its ``covered``
    interval spans them all."""

    def fetch_run(self, state: Any, chunk_ids: Sequence[int], conn: Any = None,
                  timeout_ms: int | None = None) -> tuple[int, Any]: ...


@runtime_checkable
class Snapshotting(Protocol):
    """An operator whose learned state outlives its tasks and is persisted."""

    def snapshot(self) -> dict[str, Any]: ...

    def restore(self, snap: Mapping[str, Any]) -> bool: ...


@runtime_checkable
class OperatorSpec(Protocol):
    """The frozen description of a deployed recall operator; ``build`` makes its logic.
    ``store`` is the chunk store the operator's history-queries are prepared against
    (None: built without validation, for tests)."""

    name: str

    def build(self, store: ChunkStore | None = None) -> RecallOperator: ...
