"""The Deploy Manager's errors."""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class QueryDefinitionError(MoiraeError, ValueError):
    """A query definition that cannot be deployed; names the query and the problem."""


__all__ = ["QueryDefinitionError"]
