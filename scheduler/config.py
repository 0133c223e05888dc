"""Settings of the stride scheduler (configuration apart from logic, STYLE.md).

>>> SchedulerConfig(tickets_per_result=0.25).tickets_per_result
Fraction(1, 4)
>>> SchedulerConfig(min_tickets=0)
Traceback (most recent call last):
...
scheduler.errors.InvalidSchedulerConfig: scheduler.min_tickets must be an integer >= 1, got 0
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from scheduler.errors import InvalidSchedulerConfig


def _as_fraction(key: str, value: object) -> Fraction:
    # str(float) keeps the decimal the user wrote: 0.1 -> 1/10, not 3602879701896397/2**55
    if isinstance(value, bool) or not isinstance(value, int | float | str | Fraction):
        raise InvalidSchedulerConfig(f"scheduler.{key} must be a number, got {value!r}")
    try:
        frac = Fraction(str(value)) if isinstance(value, float) else Fraction(value)
    except (ValueError, ZeroDivisionError) as exc:
        raise InvalidSchedulerConfig(f"scheduler.{key} must be a number, got {value!r}") from exc
    if frac < 0:
        raise InvalidSchedulerConfig(f"scheduler.{key} must be >= 0, got {value!r}")
    return frac


def _check_int(key: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidSchedulerConfig(f"scheduler.{key} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class SchedulerConfig:
    """Settings of :class:`scheduler.StrideScheduler`. Every bad value raises
    :class:`~scheduler.errors.InvalidSchedulerConfig` naming the key.

    - ``stride1``: Waldspurger's STRIDE1, the pass units of one quantum at one ticket.
      Strides are kept as exact fractions ``stride1 / tickets``, so its size only sets the
      resolution of the global pass (which is truncated to whole units on joins).
    - ``default_tickets``: tickets of a task submitted without a count.
    - ``min_tickets``: the floor that deduction never goes below (M 4.4).
    - ``tickets_per_result``: tickets removed per result row a quantum produced
      (M 4.4: "a number of tickets proportional to the number of results"). Fractions
      carry over between quanta, so 0.1 removes one ticket per ten rows in total.
    - ``light_load``: while query tasks are waiting, a materialization task may still
      take a slot when the caller reports ``load < light_load`` (M 4.4).
    - ``background_slots``: at most this many materialization quanta in flight while
      query tasks are waiting (only under light load).
    - ``feedback_period``: default chunks between feedback suspensions for unbounded
      tasks (None: never suspend). A task's own setting overrides it.
    - ``feedback_timeout``: default seconds a suspended task waits for feedback before
      its event's tasks are discarded.
    """

    stride1: int = 1 << 20
    default_tickets: int = 100
    min_tickets: int = 1
    tickets_per_result: Fraction | float | int | str = Fraction(1, 10)
    light_load: float = 0.5
    background_slots: int = 1
    feedback_period: int | None = None
    feedback_timeout: float = 300.0

    def __post_init__(self) -> None:
        _check_int("stride1", self.stride1, 1)
        _check_int("min_tickets", self.min_tickets, 1)
        _check_int("default_tickets", self.default_tickets, self.min_tickets)
        _check_int("background_slots", self.background_slots, 0)
        if self.feedback_period is not None:
            _check_int("feedback_period", self.feedback_period, 1)
        object.__setattr__(
            self, "tickets_per_result", _as_fraction("tickets_per_result", self.tickets_per_result)
        )
        for key in ("light_load", "feedback_timeout"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int | float) or v != v or v < 0:
                raise InvalidSchedulerConfig(f"scheduler.{key} must be a number >= 0, got {v!r}")

    @property
    def rate(self) -> Fraction:
        """``tickets_per_result`` as an exact fraction."""
        r = self.tickets_per_result
        assert isinstance(r, Fraction)
        return r
