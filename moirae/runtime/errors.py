"""The runtime's errors: the engine in the wrong state, no Java, a cluster that did not start."""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class RuntimeFailure(MoiraeError, RuntimeError):
    """Root of the runtime's errors: the engine or what it runs on cannot do what was asked."""


class EngineError(RuntimeFailure):
    """An engine operation that cannot be done in the engine's current state."""


class CheckpointMismatch(EngineError):
    """The checkpoint of a stream is missing or is not the one its batch log was written
    with (:mod:`moirae.runtime.checkpoint_identity`)."""


class JavaMissing(RuntimeFailure):
    """No Java 17+ runtime on this machine."""


class ClusterStartError(RuntimeFailure):
    """The standalone master or a worker did not come up."""


__all__ = ["CheckpointMismatch", "ClusterStartError", "EngineError", "JavaMissing", "RuntimeFailure"]
