"""Allocation-error measures of proportional-share scheduling (Waldspurger and Weihl).

After ``n`` quanta, a task holding ``t`` of ``T`` tickets is *entitled* to ``n * t / T``
of them. Its *absolute error* is ``|q - n * t / T|`` for the ``q`` quanta it got. The
*pairwise relative error* of tasks i and j is the absolute error of i in the two-task
system made of i and j alone, ``|q_i - (q_i + q_j) * t_i / (t_i + t_j)|``, which is
symmetric and equals ``|q_i * t_j - q_j * t_i| / (t_i + t_j)``.

Stride scheduling with fixed tickets keeps every pairwise relative error at or below one
quantum at every point of the run (:func:`stride_pair_bound`); the absolute error of
flat stride scheduling may grow with the number of tasks (O(n)).

>>> relative_error(3, 3, 0, 1)   # tickets 3:1, after a,a,a: entitled 2.25, got 3
Fraction(3, 4)
>>> absolute_error(3, 3, 3, 4)
Fraction(3, 4)
"""

from __future__ import annotations

from fractions import Fraction


def relative_error(q_i: int, t_i: int, q_j: int, t_j: int) -> Fraction:
    """Pairwise relative error of tasks i and j, in quanta (exact)."""
    return Fraction(abs(q_i * t_j - q_j * t_i), t_i + t_j)


def absolute_error(q: int, t: int, n: int, total_tickets: int) -> Fraction:
    """``|q - n * t / total_tickets|``: distance from the task's entitled share, in quanta."""
    return abs(q - Fraction(n * t, total_tickets))


def stride_pair_bound(t_i: int, t_j: int, *, common_base: bool = False) -> Fraction:
    """The pairwise relative error stride scheduling guarantees for two tasks with fixed
    tickets: 1 quantum in general; ``max(t_i, t_j) / (t_i + t_j)`` (< 1) for tasks that
    joined at a common base pass (``pass = base + stride``, Waldspurger's join).

    Why. A task is granted a quantum only while its pass is the lowest, so right after
    the grant its previous pass ``p_i - s_i`` is <= every other pass; passes only grow,
    so this stays true, and joins keep it (:mod:`scheduler.stride`). Write
    ``p = a + q * s`` with start pass ``a`` and ``s = S / t``. The invariant at the start
    gives ``a_j - a_i <= s_j``, and later ``a_i + (q_i - 1) s_i <= a_j + q_j s_j``, so
    ``(q_i - 1) / t_i <= (q_j + 1) / t_j``, i.e. ``q_i t_j - q_j t_i <= t_i + t_j``:
    an error of at most 1. With a common base, ``a_i - s_i = a_j - s_j`` and the same
    steps give ``q_i t_j - q_j t_i <= t_i`` (and ``>= -t_j``): at most
    ``max(t_i, t_j) / (t_i + t_j)``.

    >>> stride_pair_bound(3, 1, common_base=True)
    Fraction(3, 4)
    >>> stride_pair_bound(3, 1)
    Fraction(1, 1)
    """
    return Fraction(max(t_i, t_j), t_i + t_j) if common_base else Fraction(1)
