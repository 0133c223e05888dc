"""Deploying a validated monitor through the engine's public methods (M 4.2).

:func:`deploy` validates first (:func:`moirae.monitors.validate.validate`: nothing
changes on a bad file), then applies the monitor in one unit. On an engine with
``deploy_monitor`` (the lifecycle of deployed monitors) the applying function is handed
to it, which records everything it declares as the monitor's, skips an identical
definition, replaces an older version and, when a step fails, tears down what the step
before it declared: a monitor is never half-deployed. Order of application: reference
tables, sources (a source already registered is shared, not registered again),
the event-query, the incident grouping, context-queries, Recalls, the Similarity
Recall, rules, alert delivery.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from moirae.base.durations import parse_duration
from moirae.monitors.errors import MonitorFileError
from moirae.monitors.load import loads
from moirae.monitors.spec import MonitorSpec
from moirae.monitors.validate import Checked, import_function, validate


def _td(value: Any) -> timedelta | None:
    return None if value is None else parse_duration(value)


def applier(spec: MonitorSpec, checked: Checked) -> Callable[[Any], None]:
    """The function declaring ``spec`` on an engine (each step an engine method)."""

    def apply(engine: Any) -> None:
        from archive.spark_sink import spec_from_spark_schema

        for name, args in checked.tables:
            engine.reference_table(name, **args)
        for s in spec.sources:
            if engine.sources.get(s.name) is not None:
                continue  # shared with the monitor that registered it
            df = checked.frames[s.name]
            if s.chunk_interval is not None:  # fixed before its first batch can choose one
                engine.archive.register_stream(spec_from_spark_schema(s.name, df.schema, s.ts, indexes=s.indexes),
                                               parse_duration(s.chunk_interval))
            engine.source(s.name, df, ts=s.ts, lateness=s.lateness, indexes=list(s.indexes), sparse=s.sparse)
        q = spec.event_query
        if checked.pattern is not None:  # a MATCH_RECOGNIZE row pattern (moirae.monitors.pattern_sql)
            engine.pattern_query(spec.name, q.sql, inputs=list(checked.inputs), eid=q.eid, ts=q.ts)
        else:
            engine.event_query(spec.name, checked.fn, inputs=list(checked.inputs), eid=q.eid, ts=q.ts)
        i = spec.incidents
        if i is not None:
            engine.incidents.configure(spec.name, keys=i.keys, window=_td(i.window), gap=_td(i.gap),
                                       metric=i.metric, threshold=i.threshold, series=i.series, norm=i.norm)
        for c in spec.contexts:
            fn = c.sql if c.sql is not None else import_function(spec, ("contexts",), c.python)
            engine.context_query(spec.name, fn, inputs=list(c.inputs) if c.python else None, name=c.name,
                                 window=c.window, surrounding=c.surrounding, after=c.after)
        for r in spec.recalls:
            kwargs: dict[str, Any] = {"period": _td(r.period), "bound": _td(r.bound), "extrapolate": r.extrapolate}
            if r.time_column is not None:
                kwargs["time_column"] = r.time_column
            if r.tickets is not None:
                kwargs["tickets"] = r.tickets
            if r.feedback_period is not None:
                kwargs["feedback_period"] = r.feedback_period
            engine.recall(spec.name, r.sql, name=r.name, **kwargs)
        s = spec.similarity
        if s is not None:
            kwargs = {k: v for k, v in (("bound", _td(s.bound)), ("tickets", s.tickets),
                                        ("explain_terms", s.explain_terms)) if v is not None}
            if s.exclude_recent is not None:
                kwargs["exclude_recent"] = _td(s.exclude_recent)
            engine.similarity_recall(spec.name, k=s.k, name=s.name, numeric=list(s.numeric), **kwargs)
        for rule in spec.rules:
            args = dict(rule)
            if isinstance(args.get("on"), list):  # (recall column, stream column)
                args["on"] = tuple(args["on"])
            engine.rule(spec.name, args.pop("recall"), args.pop("kind", "suppress"), **args)
        if spec.alerts:
            engine.route_alerts(spec.name, [dict(a) for a in spec.alerts])

    return apply


def deploy(spec: MonitorSpec, engine: Any) -> Any:
    """Validate ``spec`` against ``engine``, then apply it as one unit. Returns the
    engine's answer (``deploy_monitor``'s dict), or None on an engine without it."""
    checked = validate(spec, engine)
    apply = applier(spec, checked)
    unit = getattr(engine, "deploy_monitor", None)
    if callable(unit):
        return unit(spec.name, spec.version, spec.source_text, apply)
    try:
        apply(engine)
    except Exception as exc:
        raise MonitorFileError(f"deploying failed part-way ({exc}); this engine cannot undo a monitor "
                               f"(no deploy_monitor): restart it without this file", file=spec.origin) from exc
    return None


def loader_for(engine: Any) -> Callable[[str], tuple[str, str, Callable[[Any], None]]]:
    """``text -> (name, version, apply)``: a monitor file parsed and validated against
    ``engine``, for the engine's ``deploy(text)`` and for restoring deployed monitors."""

    def load_text(text: str, origin: str = "<monitor>") -> tuple[str, str, Callable[[Any], None]]:
        spec = loads(text, origin)
        checked = validate(spec, engine)
        return spec.name, spec.version, applier(spec, checked)

    return load_text
