"""The in-memory copy of present chunks (M 4.1: "The Archiver keeps the present chunk
for all archived streams in memory to ensure fast retrieval").

Rows are written through to PostgreSQL first; this cache only mirrors them. A chunk's
cached copy is *complete* when it was loaded from PostgreSQL or built from every append
since; otherwise the next read reloads it. Demotion evicts it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pandas as pd


class PresentCache:
    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._frames: dict[tuple[str, int], list[pd.DataFrame]] = {}
        self._lock = threading.Lock()

    def add(self, stream: str, chunk_id: int, frame: pd.DataFrame, whole: bool = False) -> None:
        """Mirror rows just committed to a present chunk. ``whole``: these are all of the
        chunk's rows (a new chunk), so the copy starts here; otherwise rows are added
        only to a copy already complete (a chunk not yet loaded is read on demand)."""
        with self._lock:
            frames = self._frames.get((stream, chunk_id))
            if frames is not None and self._rows_locked() + len(frame) > self.max_rows:
                del self._frames[(stream, chunk_id)]  # over the bound: read from PostgreSQL from now on
            elif frames is not None:
                frames.append(frame)
            elif whole and self._rows_locked() + len(frame) <= self.max_rows:
                self._frames[(stream, chunk_id)] = [frame]

    def invalidate(self, stream: str, chunk_id: int) -> None:
        with self._lock:
            self._frames.pop((stream, chunk_id), None)

    def get(self, stream: str, chunk_id: int, load: Callable[[], pd.DataFrame]) -> pd.DataFrame:
        key = (stream, chunk_id)
        with self._lock:
            frames = self._frames.get(key)
            if frames is not None:
                return _concat(frames)
        frame = load()
        with self._lock:
            if self._rows_locked() + len(frame) <= self.max_rows:
                self._frames.setdefault(key, [frame])
        return frame

    def rows(self) -> int:
        with self._lock:
            return self._rows_locked()

    def _rows_locked(self) -> int:
        return sum(len(f) for frames in self._frames.values() for f in frames)

    def bytes(self) -> int:
        with self._lock:
            return int(sum(f.memory_usage(deep=False).sum() for fr in self._frames.values() for f in fr))

    def keys(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self._frames)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    if len(frames) == 1:
        return frames[0]
    merged = pd.concat(frames, ignore_index=True)
    frames[:] = [merged]
    return merged
