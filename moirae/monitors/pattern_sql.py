"""A monitor's MATCH_RECOGNIZE event-query (T 4; docs/MONITORS.md, "Pattern event-queries").

An ``event_query.sql`` whose FROM holds ``MATCH_RECOGNIZE`` is not a SELECT rebuilt on the
windowed operators (:mod:`moirae.monitors.sqlquery`): it is a row pattern, compiled by
:func:`moirae.patterns.spark_operator.compile_live` against the schema of the source it
reads and deployed with the host's ``pattern_query``
(:class:`~moirae.monitors.abc.MonitorHost`; a host without it refuses the monitor as not
available in this build, :class:`~moirae.monitors.errors.MonitorUnavailable`). Its refusals (a pattern that does not
parse or compile, a symbol used but not defined, an unbounded pattern without WITHIN, a
column the source lacks) become one :class:`~moirae.monitors.errors.MonitorFileError`
naming the file, the line of the SQL the position is on, and the pattern's own
``line:column``.
"""

from __future__ import annotations

import re
from typing import Any

_MATCH_RECOGNIZE = re.compile(r"\bMATCH_RECOGNIZE\b", re.IGNORECASE)
_AT = re.compile(r" at (\d+):(\d+):")


def is_pattern(sql: str | None) -> bool:
    """Whether ``sql`` is a row-pattern event-query.

    >>> is_pattern("SELECT * FROM ais MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS x > 1)")
    True
    >>> is_pattern("SELECT sid FROM metrics")
    False
    """
    return bool(sql) and _MATCH_RECOGNIZE.search(sql) is not None


def check_pattern(spec: Any, engine: Any, out: Any, path: tuple = ("event_query", "sql")) -> None:
    """Compile ``spec``'s pattern against its source's schema and fill ``out`` (a
    :class:`moirae.monitors.validate.Checked`): its function, its input, the pattern."""
    from moirae.monitors.errors import MonitorUnavailable
    from moirae.patterns.compile import compile_pattern
    from moirae.patterns.errors import PatternError
    from moirae.patterns.spark_operator import compile_live, pattern_function

    if not callable(getattr(engine, "pattern_query", None)):
        raise spec.error(path, "a MATCH_RECOGNIZE event-query is not available in this build (the engine has no "
                               "pattern_query())", MonitorUnavailable)
    q = spec.event_query
    first = spec.doc.text_lines.get(path) or spec.doc.line(path) or 1

    def refuse(exc: PatternError):
        m = _AT.search(str(exc))
        line = first + int(m.group(1)) - 1 if m else first
        return spec.error(path, str(exc), line=line)

    try:
        source = q.inputs[0] if q.inputs else compile_pattern(q.sql, name=spec.name).source
    except PatternError as exc:
        raise refuse(exc) from None
    if len(q.inputs) > 1:
        raise spec.error(path[:-1] + ("inputs",), f"a pattern reads one stream, got inputs {list(q.inputs)}")
    if source not in out.schemas:
        registered = engine.sources.get(source)
        if registered is None:
            declared = ", ".join(sorted(s.name for s in spec.sources)) or "none"
            raise spec.error(path, f"the pattern reads unknown stream {source!r} (declared sources: {declared})")
        out.schemas[source], out.source_ts[source] = registered.df.schema, registered.ts
    try:
        cp = compile_live(spec.name, q.sql, out.schemas[source], out.source_ts[source])
    except PatternError as exc:
        raise refuse(exc) from None
    payload = [f.name for f in out.schemas[source].fields if f.name != out.source_ts[source]]
    out.fn = pattern_function(cp, stream=source, payload=payload, eid=q.eid, ts=q.ts)
    out.inputs = (source,)
    out.pattern = cp
