"""How far each history search of an event has gone (M 4.3-4.4, replica2; :mod:`recall.replica2`).

For every recall operator of the event, one entry: ``searched_back_to`` (the oldest
event time searched, materialized or re-processed from raw chunks), ``remaining_chunks``
(chunks and raw units not searched yet; 0 once the whole archive is searched),
``materialized_until`` (where the materialized history the search began with starts),
``reprocessed_chunks`` and ``whole_archive``. A running search is read from the Recall
Manager's task (live); an ended one from its operator's status row (stored, so the
read-only console shows it too).
"""

from __future__ import annotations

from typing import Any

FIELDS = ("searched_back_to", "remaining_chunks", "materialized_until", "reprocessed_chunks")
STATUS_KEY = "__status__"


def searches(tasks: list[dict[str, Any]], results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per operator, its search's reach (module doc), from the task dicts
    (:meth:`recall.task.TaskView.as_dict`) and the operators' current results
    (:func:`moirae.read.views.apply_revisions`)."""
    out: dict[str, dict[str, Any]] = {}
    for op, res in results.items():
        status = next((i["row"] for i in res.get("current", []) if i["key"] == STATUS_KEY), None)
        if status is not None:
            out[op] = {"state": status.get("status"), **{f: status.get(f) for f in FIELDS},
                       "whole_archive": status.get("whole_archive"), "novel": status.get("novel"),
                       "novel_span": status.get("novel_span")}
        elif res.get("covered"):
            out[op] = {"state": None, "searched_back_to": res["covered"][0], "remaining_chunks": None,
                       "materialized_until": None, "reprocessed_chunks": None, "whole_archive": None}
    for t in tasks:
        if t.get("materialization") or t["state"] in ("done", "exhausted", "cancelled", "discarded", "failed"):
            continue
        out[t["operator"]] = {**out.get(t["operator"], {}), "state": t["state"],
                              **{f: t.get(f) for f in FIELDS}, "whole_archive": None}
    return out
