"""The recall package's errors. Its root, :class:`RecallError`, derives from the project's
root :class:`moirae.base.errors.MoiraeError`; each also inherits the matching built-in,
so a caller may catch ``ValueError`` or ``KeyError`` without importing this module.
Messages name the culprit (the template, the attribute, the operator, the event).
"""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class RecallError(MoiraeError):
    """Root of the recall package's errors."""


# -- templates and operators -----------------------------------------------------------
class BadTemplate(RecallError, ValueError):
    """A history-query template that cannot be split (not one SELECT, unparseable...)."""


class UnsupportedAggregate(BadTemplate):
    """An aggregate function whose partial states cannot be merged across chunks."""


class UnknownEventAttribute(RecallError, KeyError):
    """A template parameter that the event does not carry."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class SimilarityRecallError(RecallError, ValueError):
    """A Similarity Recall that cannot be built; names the operator and the problem."""


class RevisionError(RecallError, ValueError):
    """An output stream that contradicts itself (an update of a row never inserted...)."""


class SnapshotVersionError(RecallError, ValueError):
    """An operator snapshot of another kind or version than this code reads."""


# -- the Recall Manager ----------------------------------------------------------------
class RecallManagerError(RecallError):
    """Root of the Recall Manager's errors."""


class UnknownOperator(RecallManagerError, KeyError):
    """An operator name that was never registered."""


class DuplicateOperator(RecallManagerError, ValueError):
    """An operator name registered twice."""


class ManagerClosed(RecallManagerError, RuntimeError):
    """A call on a manager that has been closed."""
