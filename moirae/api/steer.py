"""Steering through the API (M 4.4): cancel an event's recall, or give its tasks more
tickets. Both report what changed. :func:`cancel_many` cancels many events in one call
(a cancel storm: one pass over the scheduler and one commit).

The work is the engine's (:class:`~moirae.read.abc.SteerSurface`); these functions only
check the event exists and the engine is steerable, take the task table before and
after, and say what differs.
"""

from __future__ import annotations

from typing import Any

from moirae.api.errors import BadEids, BadTickets, EngineNotRunning, NoSuchEvent
from moirae.read import views
from scheduler.errors import InvalidTickets, UnknownEvent
from scheduler.tickets import MAX_TICKETS
from scheduler.tickets import check_tickets as _check_ticket_count

MAX_BULK = 10_000


def _check(engine, eid: str) -> None:
    if engine.events.get(eid) is None:
        raise NoSuchEvent(f"no event {eid!r} in the event log")
    if not views.running(engine):
        raise EngineNotRunning(f"no engine is running in this process; cannot steer event {eid!r} "
                               "(start one with `moirae run`)")


def _tickets(engine, eid: str) -> dict[str, dict[str, Any]]:
    return {t["task_id"]: t for t in views.progress(engine, eid)}


def cancel(engine, eid: str) -> dict[str, Any]:
    """Cancel every open recall task of ``eid``; returns the cancelled task ids."""
    _check(engine, eid)
    before = _tickets(engine, eid)
    try:
        n = engine.cancel(eid)
    except UnknownEvent:
        n = 0
    after = _tickets(engine, eid)
    gone = [tid for tid, t in before.items() if tid not in after or after[tid]["state"] == "cancelled"]
    msg = (f"cancelled {n} recall task(s) of event {eid}" if n
           else f"event {eid} has no open recall task: nothing to cancel")
    return {"eid": eid, "action": "cancel", "changed": n > 0, "cancelled": n, "tasks": gone, "message": msg}


def cancel_many(engine, eids: list[str]) -> dict[str, Any]:
    """Cancel every open recall task of each event in ``eids`` at once. Every id must
    be in the event log (else nothing is done: NoSuchEvent names the unknown ones);
    events with nothing open are listed in ``not_open``."""
    if not isinstance(eids, list) or not 1 <= len(eids) <= MAX_BULK or not all(isinstance(e, str) for e in eids):
        raise BadEids(f"eids must be a list of 1 to {MAX_BULK} event ids (strings), got "
                      f"{type(eids).__name__} of {len(eids) if isinstance(eids, list) else '?'}")
    eids = list(dict.fromkeys(eids))
    unknown = [e for e in eids if e not in engine.events.known(eids)]
    if unknown:
        shown = ", ".join(repr(e) for e in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise NoSuchEvent(f"no event {shown} in the event log; nothing was cancelled")
    if not views.running(engine):
        raise EngineNotRunning(f"no engine is running in this process; cannot steer {len(eids)} event(s) "
                               "(start one with `moirae run`)")
    counts = engine.cancel_many(eids)
    n = sum(counts.values())
    not_open = [e for e in eids if not counts.get(e)]
    msg = (f"cancelled {n} recall task(s) of {sum(1 for c in counts.values() if c)} event(s)"
           + (f"; {len(not_open)} event(s) had no open recall task" if not_open else ""))
    return {"action": "cancel", "changed": n > 0, "cancelled": n, "events": counts, "not_open": not_open,
            "message": msg}


def check_tickets(tickets: Any) -> int:
    """``tickets`` if it is a ticket count from 1 to MAX_TICKETS, else BadTickets."""
    try:
        return _check_ticket_count(tickets, maximum=MAX_TICKETS)
    except InvalidTickets as exc:
        raise BadTickets(str(exc)) from None


def accelerate(engine, eid: str, tickets: int = 100) -> dict[str, Any]:
    """Give every open recall task of ``eid`` ``tickets`` more tickets; returns each
    task's tickets before and after."""
    tickets = check_tickets(tickets)
    _check(engine, eid)
    before = _tickets(engine, eid)
    try:
        n = engine.accelerate(eid, tickets)
    except UnknownEvent:
        n = 0
    after = _tickets(engine, eid)
    tasks = [{"task_id": tid, "operator": t["operator"], "tickets_before": before.get(tid, {}).get("tickets"),
              "tickets_after": t["tickets"], "state": t["state"]}
             for tid, t in after.items() if tid in before and t["tickets"] is not None]
    msg = (f"accelerated {n} recall task(s) of event {eid} by {tickets} tickets" if n
           else f"event {eid} has no open recall task: nothing to accelerate")
    return {"eid": eid, "action": "accelerate", "changed": n > 0, "accelerated": n, "tickets": tickets,
            "tasks": tasks, "message": msg}
