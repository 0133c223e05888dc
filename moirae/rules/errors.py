"""The rules' errors: a rule or a reference table declared wrongly."""

from __future__ import annotations

from moirae.base.errors import MoiraeError


class RuleError(MoiraeError, ValueError):
    """A rule over Recall results that cannot be deployed as declared (names the rule and the key)."""


__all__ = ["RuleError"]
