"""One stride-scheduling queue: Waldspurger and Weihl's dynamic algorithm (M 4.4, [49]).

Each client holds ``tickets``; its ``stride`` is ``STRIDE1 / tickets`` and its ``pass``
advances by one stride per quantum it is granted. The client with the lowest pass runs
next (ties: a client never granted a quantum first, then the lowest submission
number). A *global pass* advances by the global stride
``STRIDE1 / (sum of active tickets)`` per quantum granted in this queue; it is the
virtual time of a client holding all the tickets, and anchors joins and leaves:

- ``join``: ``pass = global_pass + remain``; a new client's ``remain`` is one stride, so
  it neither jumps ahead of everyone (starving them) nor starts behind (being starved).
- ``leave``: ``remain = pass - global_pass`` is kept, and a later ``rejoin`` restores it.
- ``modify``: the remain is rescaled by ``new_stride / old_stride`` (Waldspurger's
  ``client_modify``), so a client that gains tickets gets closer to its next quantum.

One refinement, because the global pass moves only with granted quanta and not with
leaves: a client that leaves with a pass above (below) the average drags the average
below (above) ``global_pass + stride``, and this drift accumulates. Stride scheduling's
bound rests on one invariant: every active client's *previous* pass (``pass - stride``)
is <= every active pass. So a joining client's pass is clamped into the interval that
keeps it, ``[L, m]`` for a new client and ``[L, m + stride]`` for a rejoin, where
``m`` is the lowest active pass and ``L`` the highest previous pass. The upper end ``m``
for new clients also puts each newcomer's first quantum before any active client's
next-but-one (M 4.4: every task quickly gets some history). With no active client the
join is Waldspurger's unchanged. See :mod:`scheduler.fairness` for the bounds.

A new client clamped to ``m`` ties with every client whose pass is ``m``; clients that
joined together with equal tickets move in lockstep, so that may be most of the queue.
The tie-break lets a client that has not had its first quantum go first, so a newcomer
is the next pick as soon as it joins, whatever the number of clients (M 4.4: a new task
gets the database at once). Which of the lowest-pass clients goes first does not enter
the fairness bounds (:func:`scheduler.fairness.stride_pair_bound` rests on the lowest
pass only).

>>> q = StrideQueue(stride1=6)
>>> q.join("a", tickets=3, seq=0); q.join("b", tickets=1, seq=1)
>>> order = []
>>> for _ in range(8):
...     c = q.pick(); q.grant(c); q.release(c); order.append(c)
>>> "".join(order)   # a joined at pass 2; b's 6 was clamped to a's pass, 2
'abaaabaa'
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from fractions import Fraction

from scheduler.errors import InvalidTickets, UnknownTask
from scheduler.tickets import check_tickets


@dataclass(slots=True)
class _Client:
    tickets: int
    stride: Fraction
    pass_: Fraction  # meaningful while active
    remain: Fraction  # meaningful while inactive (left)
    seq: int
    served: int = 0  # 1 once granted its first quantum: the tie-break after the pass
    active: bool = True  # counted in the global tickets (runnable or running)
    runnable: bool = True  # eligible for pick (active and not running)
    version: int = 0  # bumped when the entry in the pick heap goes stale
    pversion: int = 0  # bumped when the entry in the previous-pass heap goes stale


class StrideQueue:
    """Waldspurger's dynamic stride scheduler over opaque client ids (one priority level).

    ``pick`` returns the runnable client with the lowest ``(pass, seq)`` without changing
    anything; ``grant`` charges it one quantum and marks it running until ``release``.
    A running client still holds its tickets (it is in the queue), but is not picked.
    """

    def __init__(self, stride1: int = 1 << 20) -> None:
        if stride1 < 1:
            raise InvalidTickets(f"StrideQueue: stride1 must be >= 1, got {stride1!r}")
        self.stride1 = stride1
        self._clients: dict[str, _Client] = {}
        # entries (float(pass), pass, served, seq, version, cid): float() of a Fraction is
        # correctly rounded, hence monotone, so the float decides most comparisons and the
        # exact pass breaks float ties; stale entries (version mismatch) are skipped lazily
        self._heap: list[tuple[float, Fraction, int, int, int, str]] = []
        self._tickets = 0  # global tickets: sum over active clients
        self._gpass = 0  # global pass, integer part ...
        self._grem = 0  # ... plus _grem / _tickets
        self._runnable = 0
        self._running: set[str] = set()
        # max-heap of previous passes (pass - stride) of active clients, for the join
        # clamp's lower end L: entries (-float(prev), -prev, pversion, cid)
        self._prev: list[tuple[float, Fraction, int, str]] = []
        self._active = 0

    # -- introspection -------------------------------------------------------------
    def __contains__(self, cid: object) -> bool:
        return cid in self._clients

    def __len__(self) -> int:
        return len(self._clients)

    @property
    def global_tickets(self) -> int:
        return self._tickets

    @property
    def global_pass(self) -> Fraction:
        """Exact global pass: integer part plus remainder over the global tickets."""
        return Fraction(self._gpass) + (Fraction(self._grem, self._tickets) if self._tickets else 0)

    @property
    def runnable_count(self) -> int:
        return self._runnable

    def tickets(self, cid: str) -> int:
        return self._get(cid).tickets

    def stride(self, cid: str) -> Fraction:
        return self._get(cid).stride

    def pass_of(self, cid: str) -> Fraction:
        """The client's pass; for a client that left, the pass it would rejoin with now."""
        c = self._get(cid)
        return c.pass_ if c.active else self._gpass + c.remain

    # -- Waldspurger's operations --------------------------------------------------
    def min_active_pass(self) -> Fraction | None:
        """The lowest pass among active clients (runnable or running), or None."""
        top = self._heap[0][1] if self.pick() is not None else None
        running = min((self._clients[cid].pass_ for cid in self._running), default=None)
        if top is None or running is None:
            return top if running is None else running
        return min(top, running)

    def join(self, cid: str, tickets: int, seq: int) -> None:
        """A new client: ``pass = global_pass + stride`` (``client_init`` + ``client_join``),
        clamped into ``[L, m]`` (see the module docstring)."""
        if cid in self._clients:
            raise InvalidTickets(f"StrideQueue: client {cid!r} already present")
        check_tickets(tickets, subject=f"task {cid!r}")
        stride = Fraction(self.stride1, tickets)
        c = _Client(tickets=tickets, stride=stride, pass_=Fraction(0), remain=stride, seq=seq, active=False)
        self._clients[cid] = c
        self._enter(cid, c, new=True)

    def rejoin(self, cid: str) -> None:
        """A client that left comes back at ``global_pass + remain``, runnable, clamped
        into ``[L, m + stride]`` (see the module docstring)."""
        c = self._get(cid)
        if not c.active:
            self._enter(cid, c, new=False)

    def _enter(self, cid: str, c: _Client, new: bool) -> None:
        p = self._gpass + c.remain
        if self._tickets:
            m = self.min_active_pass()
            assert m is not None
            low = self._max_previous_pass()
            high = m if new else m + c.stride
            p = min(max(p, low), high)  # if concurrency broke the invariant, low > m: favour m
        c.pass_ = p
        c.active = True
        self._active += 1
        self._set_tickets(self._tickets + c.tickets)
        self._push_previous(c, cid)
        self._make_runnable(c, cid)

    def leave(self, cid: str) -> None:
        """Take the client out of the queue, remembering ``remain = pass - global_pass``."""
        c = self._get(cid)
        if not c.active:
            return
        c.remain = c.pass_ - self._gpass
        self._running.discard(cid)
        self._make_unrunnable(c)
        c.active = False
        c.pversion += 1
        self._active -= 1
        self._set_tickets(self._tickets - c.tickets)

    def remove(self, cid: str) -> None:
        """Forget the client entirely (finished, cancelled or discarded)."""
        self.leave(cid)
        del self._clients[cid]
        self._maybe_compact()

    def modify(self, cid: str, tickets: int) -> None:
        """Change the client's tickets, rescaling its remain by ``new_stride / old_stride``."""
        check_tickets(tickets, subject=f"task {cid!r}")
        c = self._get(cid)
        if tickets == c.tickets:
            return
        scale = Fraction(c.tickets, tickets)  # new_stride / old_stride
        new_stride = Fraction(self.stride1, tickets)
        if c.active:
            # A client behind the global pass (negative remain: drift) keeps its pass, so
            # losing tickets never moves a client earlier.
            remain = c.pass_ - self._gpass
            remain = remain * scale if remain > 0 else remain
            self._set_tickets(self._tickets - c.tickets + tickets)
            c.pass_ = self._gpass + remain
        else:
            c.remain = c.remain * scale if c.remain > 0 else c.remain
        c.tickets, c.stride = tickets, new_stride
        if c.active:
            self._push_previous(c, cid)
        if c.runnable:  # its heap entry is stale: re-key it
            c.version += 1
            heapq.heappush(self._heap, (float(c.pass_), c.pass_, c.served, c.seq, c.version, cid))
            self._maybe_compact()

    # -- allocation ----------------------------------------------------------------
    def pick(self) -> str | None:
        """The runnable client with the lowest (pass, served, seq), or None: among
        the lowest pass, one never granted a quantum first. Changes nothing."""
        heap = self._heap
        while heap:
            _, _, _, _, version, cid = heap[0]
            c = self._clients.get(cid)
            if c is not None and c.runnable and c.version == version:
                return cid
            heapq.heappop(heap)
        return None

    def grant(self, cid: str) -> None:
        """Charge the client one quantum (``pass += stride``), advance the global pass by
        the global stride, and mark the client running until :meth:`release`."""
        c = self._get(cid)
        if not c.runnable:
            raise InvalidTickets(f"StrideQueue: client {cid!r} is not runnable")
        self._make_unrunnable(c)
        self._running.add(cid)
        c.served = 1
        c.pass_ += c.stride
        self._push_previous(c, cid)
        # global_pass += stride1 / global_tickets, with the remainder carried exactly
        self._grem += self.stride1
        self._gpass += self._grem // self._tickets
        self._grem %= self._tickets

    def release(self, cid: str) -> None:
        """The client's quantum is over: it may be picked again."""
        c = self._get(cid)
        self._running.discard(cid)
        if c.active and not c.runnable:
            self._make_runnable(c, cid)

    # -- internals -----------------------------------------------------------------
    def _get(self, cid: str) -> _Client:
        try:
            return self._clients[cid]
        except KeyError:
            raise UnknownTask(f"stride queue has no task {cid!r}") from None

    def _set_tickets(self, new: int) -> None:
        # keep the fractional global pass when the denominator (global tickets) changes
        old = self._tickets
        self._grem = self._grem * new // old if old and new else 0
        self._tickets = new

    def _push_previous(self, c: _Client, cid: str) -> None:
        c.pversion += 1
        prev = c.pass_ - c.stride
        heapq.heappush(self._prev, (-float(prev), -prev, c.pversion, cid))

    def _max_previous_pass(self) -> Fraction:
        """``L``: the highest previous pass (``pass - stride``) among active clients."""
        heap = self._prev
        while True:
            _, neg, pversion, cid = heap[0]  # an active client exists: never empty here
            c = self._clients.get(cid)
            if c is not None and c.active and c.pversion == pversion:
                return -neg
            heapq.heappop(heap)

    def _make_runnable(self, c: _Client, cid: str) -> None:
        c.runnable = True
        c.version += 1
        self._runnable += 1
        heapq.heappush(self._heap, (float(c.pass_), c.pass_, c.served, c.seq, c.version, cid))
        self._maybe_compact()

    def _make_unrunnable(self, c: _Client) -> None:
        if c.runnable:
            c.runnable = False
            c.version += 1
            self._runnable -= 1

    def _maybe_compact(self) -> None:
        # stale heap entries are dropped lazily; rebuild when they dominate
        if len(self._heap) > 2 * self._runnable + 64:
            self._heap = [
                (float(c.pass_), c.pass_, c.served, c.seq, c.version, cid)
                for cid, c in self._clients.items()
                if c.runnable
            ]
            heapq.heapify(self._heap)
        if len(self._prev) > 2 * self._active + 64:
            self._prev = []
            for cid, c in self._clients.items():
                if c.active:
                    prev = c.pass_ - c.stride
                    self._prev.append((-float(prev), -prev, c.pversion, cid))
            heapq.heapify(self._prev)
