"""JSON views of incidents for the API and console: an incident with what
the on-call page draws of it.

- the **norm** of its opening event (the Recall whose rows carry ``mean_<m>`` and
  ``sd_<m>``, M fig. 2), refined live as its task reads more history, with the interval
  of history it covers;
- the **current value** (the latest event's triggering value) and how many sd it is
  above the norm;
- the **series**: the raw metric of the incident's key around it (one read-only SELECT
  with bound parameters on the archived stream), and the event-query's threshold.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from moirae.incidents.store import metric_of, norm_of
from moirae.read import archive_view, views

#: history shown before the incident's first window and after its last event (at least; two
#: windows before and one after when the event-query's window is longer), and the longest
#: chart (at least 24 windows)
BEFORE, AFTER = timedelta(minutes=30), timedelta(minutes=15)
MAX_SPAN = timedelta(hours=6)
MAX_POINTS = 1500


def incident_detail(engine, incident: str) -> dict[str, Any]:
    """The incident (raises :class:`moirae.incidents.store.NoSuchIncident`) with its norm,
    current value and chart series."""
    store = engine.incidents
    inc = store.get(incident)
    cfg = store.config(inc["event"])
    norm = norm_for(engine, incident, cfg.norm, cfg.metric)
    latest = inc["events"][-1] if inc["events"] else None
    current = None
    if latest is not None:
        rec = engine.events.get(latest["eid"])
        value = latest["value"]
        if value is None and rec is not None:
            value = metric_of(rec.attrs, norm["metric"] if norm else "", cfg.metric) if (norm or cfg.metric) else None
        if value is not None:
            z = None if not norm or not norm["sd"] else (value - norm["mean"]) / norm["sd"]
            current = {"eid": latest["eid"], "ts": latest["ts"], "value": value, "z": z}
    return {**inc, "metric": cfg.metric, "threshold": cfg.threshold, "keys": list(cfg.rule.keys),
            "window_s": cfg.rule.window.total_seconds(), "norm": norm, "current": current,
            "series": series(engine, inc, cfg)}


def norm_for(engine, eid: str, operator: str | None, metric: str | None) -> dict[str, Any] | None:
    """The current norm of event ``eid`` (mean, sd, n, the history it covers), or None."""
    engine.results.flush(5.0)  # outputs already on the bus are in the table
    results = views.apply_revisions(engine.results.read(eid))
    for op, res in results.items():
        if operator is not None and op != operator:
            continue
        for item in res["current"]:
            found = norm_of(item["row"], metric)
            if found is not None:
                m, mean, sd = found
                n = item["row"].get("n")
                return {"operator": op, "metric": m, "mean": mean, "sd": sd,
                        "n": n if isinstance(n, int) else None, "covered": res["covered"],
                        "revisions": len(res["history"])}
    return None


def series(engine, inc: dict[str, Any], cfg) -> dict[str, Any] | None:
    """``{"stream", "column", "points": [[iso time, value], ...]}`` of the incident's key
    around it, or None when no series is configured or the key is composite."""
    if cfg.series is None or len(cfg.rule.keys) != 1:
        return None
    stream, column = cfg.series
    w = cfg.rule.window  # an hourly or daily window's incident is charted at its own scale
    start = datetime.fromisoformat(inc["start"]) - w - max(BEFORE, 2 * w)
    end = min(datetime.fromisoformat(inc["last_event"]) + max(AFTER, w), start + max(MAX_SPAN, 24 * w))
    try:
        rows = archive_view.series(engine.archive, stream, column, cfg.rule.keys[0], inc["key"], start, end)
    except LookupError:
        return None
    step = max(1, len(rows) // MAX_POINTS)
    points = [[t.isoformat(), float(v)] for t, v in rows[::step] if v is not None]
    return {"stream": stream, "column": column, "start": start.isoformat(), "end": end.isoformat(),
            "points": points}
