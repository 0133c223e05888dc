"""Allocation-error measures of proportional-share scheduling (Waldspurger and Weihl).

After ``n`` quanta, a task holding ``t`` of ``T`` tickets is *entitled* to ``n * t / T``
of them. Its *absolute error* is ``|q - n * t / T|`` for the ``q`` quanta it got. The
*pairwise relative error* of tasks i and j is the absolute error of i in the two-task
system made of i and j alone, ``|q_i - (q_i + q_j) * t_i / (t_i + t_j)|``, which is
symmetric and equals ``|q_i * t_j - q_j * t_i| / (t_i + t_j)``.

Stride scheduling with fixed tickets keeps every pairwise relative error below one
quantum at every point of the run (see :func:`stride_pair_bound`); the absolute error of
basic stride scheduling may grow with the number of tasks (O(n)).

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


def stride_pair_bound(t_i: int, t_j: int) -> Fraction:
    """The bound stride scheduling guarantees for the pairwise relative error of two
    tasks with fixed tickets that joined together: ``max(t_i, t_j) / (t_i + t_j)`` < 1.

    Why: a task is granted a quantum only while its pass is the lowest, so right after
    the grant its previous pass ``p_i - s_i`` is <= every other pass, and that stays
    true as passes only grow. With passes ``p = p0 + (q + 1) * s`` and ``s = S / t``,
    ``p_i - s_i <= p_j`` gives ``q_i * t_j - q_j * t_i <= t_i``, and symmetrically
    ``>= -t_j``. Dividing by ``t_i + t_j`` gives the bound.

    >>> stride_pair_bound(3, 1)
    Fraction(3, 4)
    """
    return Fraction(max(t_i, t_j), t_i + t_j)
