"""A streaming query's checkpoint and the archive's batch log belong together.

Every checkpoint directory of an archive query gets an identity (a random id in the
file ``moirae_identity``, created ``0600`` with the directory); the archive records it
per stream (:mod:`archive.checkpoint_identity`). Before the query starts,
:func:`verify` compares the two:

- the same identity: the checkpoint numbered the batches the log holds; go on;
- nothing recorded yet: a new stream, or an archive from before identities (its
  checkpoint, if it has progress, is adopted); the identity is recorded;
- the checkpoint is missing (no identity, no progress) while the log holds batches:
  Spark would start again at batch 0 and the archive would skip batches 0..N as already
  done, losing them silently: refused (:class:`CheckpointMismatch`), in one line saying
  what to do;
- another identity (a checkpoint from elsewhere): refused the same way.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from archive import checkpoint_identity as log
from moirae.runtime.errors import CheckpointMismatch

IDENTITY_FILE = "moirae_identity"

def identity_of(checkpoint: Path) -> str | None:
    try:
        return (Path(checkpoint) / IDENTITY_FILE).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def has_progress(checkpoint: Path) -> bool:
    """Whether Spark committed anything into ``checkpoint`` (an offsets or commits log)."""
    return any(any((Path(checkpoint) / d).glob("[0-9]*")) for d in ("offsets", "commits")
               if (Path(checkpoint) / d).is_dir())


def _create(checkpoint: Path) -> str:
    checkpoint = Path(checkpoint)
    if not checkpoint.is_dir():
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        checkpoint.mkdir(mode=0o700, exist_ok=True)
    ident = uuid.uuid4().hex
    try:
        fd = os.open(checkpoint / IDENTITY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return identity_of(checkpoint) or ident
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(ident + "\n")
    return ident


def verify(db, stream: str, checkpoint: Path) -> str:
    """Check (and on first use record) that ``checkpoint`` is the one ``stream``'s batch
    log in ``db`` was written with; returns its identity. Raises
    :class:`CheckpointMismatch` (see the module doc)."""
    checkpoint = Path(checkpoint)
    mine = identity_of(checkpoint)
    theirs, last = log.recorded(db, stream)
    if theirs is None or (last is None and mine is None):
        if last is not None and mine is None and not has_progress(checkpoint):
            raise CheckpointMismatch(_lost(stream, checkpoint, last))
        mine = mine or _create(checkpoint)
        if theirs is not None:
            log.forget(db, stream)
        log.record(db, stream, mine)
        return mine
    if mine == theirs:
        return mine
    if mine is None:
        raise CheckpointMismatch(_lost(stream, checkpoint, last))
    raise CheckpointMismatch(
        f"stream {stream!r}: the checkpoint {checkpoint} (identity {mine}) is not the one the archive's batch log "
        f"was written with (identity {theirs}); resuming from it would skip or repeat batches: run with the data "
        "directory that archived this database schema, or archive into a new postgres.schema")


def _lost(stream: str, checkpoint: Path, last: int) -> str:
    return (f"stream {stream!r}: its checkpoint {checkpoint} is missing, but the archive's batch log holds "
            f"batches up to {last}; Spark would start again at batch 0 and those batches would be skipped as done: "
            "restore the data directory (its checkpoints) from a backup, or archive into a new postgres.schema")
