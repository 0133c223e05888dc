"""Everything about a monitor that can be checked before anything changes (docs/MONITORS.md).

:func:`validate` takes a :class:`~moirae.monitors.spec.MonitorSpec` and an engine
(:class:`~moirae.monitors.abc.MonitorHost`) and raises one
:class:`~moirae.monitors.errors.MonitorFileError` naming the file, the line and the key
of the first problem; it starts no query and registers nothing. It checks:

- sources: a known kind, its options against the kind's schema, declared Spark types,
  the event-time column and the indexes among the source's columns, a chunk interval
  agreeing with the one the archive recorded; a name already registered must have the
  same columns (it is shared);
- the event-query: a SQL one is compiled onto the instrumented operators
  (:mod:`moirae.monitors.sqlquery`) and its plan analysed by Spark over empty frames of
  the sources' schemas (unknown column, bad function, type errors); a comparison of a
  text column with a number is a type mismatch; a Python one is imported and applied to
  the same empty frames; every input a declared or registered source;
- context-queries and Recalls: the engine's SQL safety rules (one read-only SELECT over
  archived streams, parameters bound: :func:`archive.history.prepare`,
  :func:`moirae.queries.context_sql.prepare`), the Recall's post-operators
  (:func:`recall.split.split_template`) and its parameters among the event's attributes;
- the Similarity Recall's numeric attributes (numeric context columns), the incident
  grouping's keys, metric, series and norm;
- sections whose engine side this build lacks (rules, reference tables, alert
  delivery, a ``MATCH_RECOGNIZE`` event-query): refused as
  :class:`~moirae.monitors.errors.MonitorUnavailable`.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlglot import exp

from moirae.base.durations import DurationError, parse_duration
from moirae.monitors.errors import MonitorFileError, MonitorUnavailable, UnsupportedSql
from moirae.monitors.pattern_sql import check_pattern, is_pattern
from moirae.monitors.spec import ContextSpec, MonitorSpec, SourceSpec
from moirae.monitors.sqlquery import CompiledQuery, compile_sql

NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal", "byte", "short", "long",
           "integer", "real")
#: optional engine methods per section (built by other parts of the code base)
SECTION_METHODS = {"rules": "rule", "reference_tables": "reference_table", "alerts": "route_alerts"}


@dataclass
class Checked:
    """What validation learned, reused by deploy: each source's DataFrame builder
    result, the event-query function and its output schema."""

    frames: dict[str, Any] = field(default_factory=dict)  # source -> its streaming DataFrame, as built
    options: dict[str, dict] = field(default_factory=dict)  # source -> its options, engine-filled ones included
    schemas: dict[str, Any] = field(default_factory=dict)  # source -> StructType (every input)
    source_ts: dict[str, str] = field(default_factory=dict)
    fn: Callable | None = None
    inputs: tuple[str, ...] = ()
    output: Any = None  # StructType of the events
    compiled: CompiledQuery | None = None
    pattern: Any = None  # the CompiledPattern of a MATCH_RECOGNIZE event-query (moirae.monitors.pattern_sql)
    tables: list[tuple[str, dict]] = field(default_factory=list)  # reference tables: name, load arguments


def _is_numeric(dtype: Any) -> bool:
    return dtype.typeName() in NUMERIC or dtype.simpleString().split("(")[0] in NUMERIC


def _duration(spec: MonitorSpec, path: tuple, value: Any, positive: bool = False):
    try:
        return parse_duration(value, positive=positive)
    except DurationError as exc:
        raise spec.error(path, str(exc)) from None


def import_function(spec: MonitorSpec, path: tuple, ref: str) -> Callable:
    """``module:function`` imported; an error names the line."""
    module, _, name = ref.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise spec.error(path, f"cannot import module {module!r}: {exc}") from None
    except AttributeError:
        raise spec.error(path, f"module {module!r} has no {name!r}") from None
    if not callable(fn):
        raise spec.error(path, f"{ref} is not a function")
    return fn


def _first_line(exc: BaseException) -> str:
    text = getattr(exc, "getMessage", lambda: None)() or str(exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def check_sources(spec: MonitorSpec, engine: Any, out: Checked) -> None:
    from moirae.sources.errors import UnknownSourceKind
    from moirae.sources.kinds import kind as kind_of

    spark = engine.spark
    own = {src for m in _monitors(engine) if m.get("name") == spec.name for src in m.get("sources") or ()}
    for s in spec.sources:
        base = ("sources", s.name)
        try:
            k = kind_of(s.kind)
        except UnknownSourceKind as exc:
            cls = MonitorUnavailable if "not available" in str(exc) else MonitorFileError
            raise spec.error((*base, "kind"), str(exc), cls) from None
        options = _resolve_paths(spec, dict(s.options))
        for opt in k.engine_options:  # e.g. the receivers' data directory
            if opt == "data_dir":
                options.setdefault(opt, str(getattr(engine, "data_dir", "")))
        _check_options(spec, base, k.options_schema, options)
        checked_options = out.options[s.name] = options
        schema = _schema(spec, base, s, spark) if s.schema else None
        if k.needs_schema and schema is None:
            raise spec.error(base, f"a {s.kind!r} source needs its columns declared under 'schema:'")
        _duration(spec, (*base, "lateness"), s.lateness)
        try:
            df = _apply_columns(k.build(spark, checked_options, schema), s)
        except MonitorFileError:
            raise
        except Exception as exc:  # the kind's own check of its options, or Spark's analysis
            raise spec.error((*base, "options") if s.options else base,
                             f"source {s.name!r} ({s.kind}): {_first_line(exc)}") from None
        cols = list(df.columns)
        if s.ts not in cols:
            raise spec.error((*base, "ts"), f"source {s.name!r} has no event-time column {s.ts!r} (columns: "
                                            f"{', '.join(cols)})")
        if df.schema[s.ts].dataType.typeName() not in ("timestamp", "timestamp_ntz"):
            raise spec.error((*base, "ts"), f"event-time column {s.ts!r} of {s.name!r} is "
                                            f"{df.schema[s.ts].dataType.simpleString()}, not a timestamp "
                                            f"(declare it timestamp, or compute it under 'columns:')")
        for i, ix in enumerate(s.indexes):
            for c in ix:
                if c not in cols:
                    raise spec.error((*base, "indexes", i), f"index column {c!r} is not a column of {s.name!r}")
        if s.chunk_interval is not None:
            span = _duration(spec, (*base, "chunk_interval"), s.chunk_interval, positive=True)
            if engine.archive.has_interval(s.name) and engine.archive.grid_of(s.name).span != span:
                raise spec.error((*base, "chunk_interval"),
                                 f"stream {s.name!r} is archived in chunks of {engine.archive.grid_of(s.name).span}"
                                 f"; it cannot change to {span}")
        registered = engine.sources.get(s.name)
        if registered is not None and s.name in own:  # this monitor's older version: replaced
            registered = None
        if registered is not None:
            old = [f.name for f in registered.df.schema.fields]
            if old != cols:
                raise spec.error(base, f"source {s.name!r} is already registered with columns {old}; this "
                                       f"file declares {cols} (a source shared by monitors must be the same)")
            out.schemas[s.name] = registered.df.schema
        else:
            out.schemas[s.name] = df.schema
        out.frames[s.name] = df  # registered at apply unless registered then (a new version replacing its own)
        out.source_ts[s.name] = s.ts


#: options naming a file or folder: relative to the monitor file's folder
PATH_OPTIONS = ("path", "config", "deadLetterPath")


def _resolve_paths(spec: MonitorSpec, options: dict) -> dict:
    origin = Path(spec.origin)
    if origin.is_file():
        for key in PATH_OPTIONS:
            v = options.get(key)
            if isinstance(v, str) and v and "://" not in v and not Path(v).is_absolute():
                options[key] = str((origin.parent / v).resolve())
    return options


def _check_options(spec: MonitorSpec, base: tuple, schema: Mapping, options: dict) -> None:
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(options), key=lambda e: len(e.path))
    if not errors:
        return
    e = errors[0]
    path = (*base, "options", *e.absolute_path)
    if e.validator == "additionalProperties":
        extra = [k for k in options if k not in schema.get("properties", {})]
        if extra:
            allowed = ", ".join(sorted(schema.get("properties", {})))
            raise spec.error((*path, extra[0]), f"unknown option {extra[0]!r} (options: {allowed})")
    raise spec.error(path, e.message)


def _schema(spec: MonitorSpec, base: tuple, s: SourceSpec, spark) -> Any:
    ddl = ", ".join(f"`{c}` {t}" for c, t in s.schema.items())
    try:
        return spark.createDataFrame([], ddl).schema
    except Exception:
        for c, t in s.schema.items():
            try:
                spark.createDataFrame([], f"`{c}` {t}")
            except Exception:
                raise spec.error((*base, "schema", c), f"{t!r} is not a Spark type (string, double, bigint, "
                                                       f"int, boolean, timestamp, ...)") from None
        raise spec.error((*base, "schema"), f"not a valid schema: {ddl}") from None


def _apply_columns(df: Any, s: SourceSpec) -> Any:
    from pyspark.sql import functions as F

    if s.columns:
        df = df.select(*[F.expr(e).alias(c) for c, e in s.columns.items()])
    if s.drop:
        df = df.drop(*s.drop)
    return df


def check_event_query(spec: MonitorSpec, engine: Any, out: Checked) -> None:
    q = spec.event_query
    base = ("event_query",)
    declared = {s.name for s in spec.sources}
    if is_pattern(q.sql):  # a MATCH_RECOGNIZE row pattern (moirae.monitors.pattern_sql)
        check_pattern(spec, engine, out)
    elif q.sql is not None:
        columns = {n: [f.name for f in st.fields] for n, st in out.schemas.items()}
        for name in declared - set(columns):
            columns[name] = []
        try:
            compiled = compile_sql(q.sql, columns, out.source_ts, ts=q.ts, eid=q.eid)
        except UnsupportedSql as exc:
            raise _sql_error(spec, (*base, "sql"), exc) from None
        if q.inputs and set(q.inputs) != set(compiled.inputs):
            raise spec.error((*base, "inputs"), f"inputs {list(q.inputs)} differ from the streams the SQL reads "
                                                f"{list(compiled.inputs)}")
        out.compiled, out.fn, out.inputs = compiled, compiled.fn, compiled.inputs
        _check_sql_types(spec, (*base, "sql"), q.sql, out)
    else:
        if not q.inputs:
            raise spec.error(base, "a python event-query needs its 'inputs' (the sources it reads, in order)")
        fn = import_function(spec, (*base, "python"), q.python)
        if q.args is not None:
            try:
                fn = fn(**dict(q.args))
            except Exception as exc:
                raise spec.error((*base, "args"), f"{q.python}(**args) failed: {_first_line(exc)}") from None
        for i, name in enumerate(q.inputs):
            if name not in out.schemas:
                registered = engine.sources.get(name)
                if registered is None:
                    raise spec.error((*base, "inputs", i), f"unknown stream {name!r} (declared sources: "
                                                           f"{', '.join(sorted(declared)) or 'none'})")
                out.schemas[name], out.source_ts[name] = registered.df.schema, registered.ts
        out.fn, out.inputs = fn, tuple(q.inputs)
    out.output = _analyse(spec, engine, out, (*base, "sql" if q.sql is not None else "python"))
    cols = out.output.fieldNames()
    for what, col in (("eid", q.eid), ("ts", q.ts)):
        if col not in cols:
            raise spec.error(base, f"the event-query's events have no column {col!r} ({what}); columns: "
                                   f"{', '.join(cols)}")


def _sql_error(spec: MonitorSpec, path: tuple, exc: UnsupportedSql) -> MonitorFileError:
    first = spec.doc.text_lines.get(path) or spec.doc.line(path) or 1
    return spec.error(path, exc.message, line=first + exc.sql_line - 1)


def _analyse(spec: MonitorSpec, engine: Any, out: Checked, path: tuple) -> Any:
    """The event-query applied to empty static frames of its inputs' schemas, as the
    instrumented plan the engine builds (Spark analyses it; nothing runs)."""
    from ananke.ids import PROV
    from ananke.query import Provenanced, ProvQuery

    spark = engine.spark
    pq = ProvQuery(enabled=True)
    try:
        inputs = [pq.source(spark.createDataFrame([], out.schemas[n]), n, out.source_ts[n]) for n in out.inputs]
        res = out.fn(*inputs)
        if not isinstance(res, Provenanced):
            raise spec.error(path, f"the event-query must return the instrumented stream (a Provenanced), got "
                                   f"{type(res).__name__}")
        return res.sink(spec.name).df.drop(PROV).schema
    except MonitorFileError:
        raise
    except Exception as exc:
        line = None
        if spec.event_query.sql is not None:  # the line of the first name Spark quotes
            first = spec.doc.text_lines.get(path) or spec.doc.line(path) or 1
            quoted = re.findall(r"`([^`]+)`", _first_line(exc)) + re.findall(r'"([^"]+)"', _first_line(exc))
            line = first + locate(spec.event_query.sql, [q.split(".")[-1] for q in quoted]) - 1
        raise spec.error(path, f"Spark cannot analyse the event-query: {_first_line(exc)}", line=line) from None


def _check_sql_types(spec: MonitorSpec, path: tuple, sql: str, out: Checked) -> None:
    """A text column (or an aggregate of one that keeps its type) compared with a number,
    or a numeric column with a text literal: Spark would cast and fail (or drop rows)
    at run time, so it is refused now."""
    import sqlglot

    from moirae.monitors.sqlquery import DIALECT, _mask_window

    tree = sqlglot.parse_one(_mask_window(sql), read=DIALECT)
    alias = {t.alias_or_name: t.name for t in tree.find_all(exp.Table)}
    first = spec.doc.text_lines.get(path) or spec.doc.line(path) or 1

    def type_of(node: exp.Expression) -> str | None:
        if isinstance(node, (exp.Max, exp.Min, exp.First, exp.Last, exp.AnyValue)):
            node = node.this
        if isinstance(node, exp.Column):
            tables = [alias[node.table]] if node.table in alias else list(out.schemas)
            for t in tables:
                st = out.schemas.get(t)
                if st is not None and node.name in st.fieldNames():
                    return "number" if _is_numeric(st[node.name].dataType) else st[node.name].dataType.typeName()
        if isinstance(node, exp.Literal):
            return "string" if node.is_string else "number"
        return None

    for cmp in tree.find_all(exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ, exp.NEQ):
        a, b = type_of(cmp.this), type_of(cmp.expression)
        if {a, b} == {"string", "number"}:
            text = cmp.sql(dialect=DIALECT)
            line = first + locate(sql, [text, cmp.this.sql(dialect=DIALECT)]) - 1
            raise spec.error(path, f"type mismatch: {text} compares a text value with a number", line=line)


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower().replace("`", "").replace('"', "")).strip()


def locate(sql: str, needles: list[str]) -> int:
    """The 1-based line of ``sql`` holding the first of ``needles`` found (case and
    spacing ignored), else 1."""
    lines = sql.splitlines() or [""]
    for needle in needles:
        n = _squash(needle)
        if not n:
            continue
        for i, line in enumerate(lines):
            if n in _squash(line):
                return i + 1
    return 1


def check_contexts(spec: MonitorSpec, engine: Any, out: Checked, known: set[str]) -> None:
    from moirae.queries import context_sql
    from moirae.queries.hybrid import QueryDefinitionError

    names = set()
    for i, c in enumerate(spec.contexts):
        base = ("contexts", i)
        if c.name in names:
            raise spec.error((*base, "name"), f"context-query {c.name!r} is declared twice")
        names.add(c.name)
        _duration(spec, (*base, "window"), c.window)
        _duration(spec, (*base, "after"), c.after)
        if c.sql is not None:
            try:
                context_sql.prepare(spec.name, c.name, c.sql, known)
            except QueryDefinitionError as exc:
                raise spec.error((*base, "sql"), str(exc)) from None
        else:
            import_function(spec, (*base, "python"), c.python)
            for j, s in enumerate(c.inputs):
                if s not in known:
                    raise spec.error((*base, "inputs", j), f"unknown stream {s!r}")


def check_recalls(spec: MonitorSpec, out: Checked, known: set[str]) -> None:
    from archive.errors import UnsafeQuery
    from archive.history import prepare
    from recall.errors import RecallError
    from recall.split import split_template

    attrs = tuple(out.output.fieldNames())
    names = set()
    for i, r in enumerate(spec.recalls):
        base = ("recalls", i)
        if r.name in names:
            raise spec.error((*base, "name"), f"Recall {r.name!r} is declared twice")
        names.add(r.name)
        for key in ("period", "bound"):
            if getattr(r, key) is not None:
                _duration(spec, (*base, key), getattr(r, key), positive=True)
        try:
            split = split_template(r.sql, event_attrs=attrs)
            prepare(split.chunk_sql, known)
        except (UnsafeQuery, RecallError) as exc:
            raise spec.error((*base, "sql"), f"unsafe or invalid history-query: {exc}") from None
        except Exception as exc:  # sqlglot's parse errors
            raise spec.error((*base, "sql"), f"bad history-query SQL: {_first_line(exc)}") from None


def check_similarity(spec: MonitorSpec, out: Checked) -> None:
    s = spec.similarity
    if s is None:
        return
    base = ("similarity",)
    if s.name in {r.name for r in spec.recalls}:
        raise spec.error((*base, "name"), f"the Similarity Recall's name {s.name!r} is also a Recall's")
    compared = [c for c in spec.contexts if not c.surrounding]
    if not compared:
        raise spec.error(base, "a Similarity Recall compares contexts: declare a context-query (not surrounding)")
    for key in ("bound", "exclude_recent"):
        if getattr(s, key) is not None:
            _duration(spec, (*base, key), getattr(s, key))
    for i, attr in enumerate(s.numeric):
        found = [_context_column_type(c, attr, out) for c in compared]
        found = [f for f in found if f is not False]
        if not found:
            raise spec.error((*base, "numeric", i), f"numeric attribute {attr!r} is not a column of any compared "
                                                    f"context-query ({', '.join(c.name for c in compared)})")
        if any(t is not None and t != "number" for t in found):
            raise spec.error((*base, "numeric", i), f"numeric attribute {attr!r} is {found[0]}, not a number")


def _context_column_type(c: ContextSpec, attr: str, out: Checked) -> Any:
    """False when ``c`` has no output column ``attr``; else its type ("number", a type
    name) when it can be told from the schemas, or None."""
    import sqlglot

    if c.sql is None:
        return None  # a Spark function: its columns are known when it runs
    tree = sqlglot.parse_one(c.sql, read="postgres")
    alias = {t.alias_or_name: t.name for t in tree.find_all(exp.Table)}
    for item in tree.expressions:
        if item.alias_or_name != attr:
            continue
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Column):
            table = alias.get(node.table)
            st = out.output if table == "events" else out.schemas.get(table)
            if st is not None and node.name in st.fieldNames():
                dt = st[node.name].dataType
                return "number" if _is_numeric(dt) else dt.typeName()
        return None
    return False


def check_incidents(spec: MonitorSpec, out: Checked, known: set[str]) -> None:
    i = spec.incidents
    if i is None:
        return
    base = ("incidents",)
    cols = out.output.fieldNames()
    for j, k in enumerate(i.keys or ()):
        if k not in cols:
            raise spec.error((*base, "keys", j), f"incident key {k!r} is not an event column ({', '.join(cols)})")
    if i.window is not None:
        _duration(spec, (*base, "window"), i.window, positive=True)
    if i.gap is not None:
        _duration(spec, (*base, "gap"), i.gap, positive=True)
    if i.metric is not None:
        if i.metric not in cols:
            raise spec.error((*base, "metric"), f"metric {i.metric!r} is not an event column ({', '.join(cols)})")
        if not _is_numeric(out.output[i.metric].dataType):
            raise spec.error((*base, "metric"), f"metric {i.metric!r} is "
                                                f"{out.output[i.metric].dataType.simpleString()}, not a number")
    if i.series is not None:
        stream, col = i.series
        if stream not in out.schemas and stream not in known:
            raise spec.error((*base, "series"), f"unknown stream {stream!r} in series")
        st = out.schemas.get(stream)
        if st is not None and col not in st.fieldNames():
            raise spec.error((*base, "series"), f"stream {stream!r} has no column {col!r}")
    if i.norm is not None and i.norm not in {r.name for r in spec.recalls}:
        raise spec.error((*base, "norm"), f"norm {i.norm!r} is not one of this monitor's Recalls")


def check_sections(spec: MonitorSpec, engine: Any, out: Checked) -> None:
    """Rules, reference tables and alert delivery: their engine side must be there, and
    what they name must exist."""
    for section, method in SECTION_METHODS.items():
        if getattr(spec, section) and not callable(getattr(engine, method, None)):
            raise spec.error((section,), f"'{section}' is not available in this build (the engine has no "
                                         f"{method}())", MonitorUnavailable)
    recalls = {r.name for r in spec.recalls}
    for i, rule in enumerate(spec.rules):
        if rule["recall"] not in recalls:
            raise spec.error(("rules", i, "recall"), f"rule over unknown Recall {rule['recall']!r} (this monitor's "
                                                     f"Recalls: {', '.join(sorted(recalls)) or 'none'})")
        if rule.get("kind") == "join" and not rule.get("stream"):
            raise spec.error(("rules", i), "a join rule needs the live 'stream' it joins")
    for i, table in enumerate(spec.reference_tables):
        args = {k: v for k, v in table.items() if k != "name"}
        if "csv" in args:
            args["csv"] = _resolve_paths(spec, {"path": args["csv"]})["path"]
            if not Path(args["csv"]).is_file():
                raise spec.error(("reference_tables", i, "csv"), f"no such file: {args['csv']}")
        out.tables.append((table["name"], args))
    if spec.alerts:
        try:
            from moirae.delivery.targets import parse_targets
        except ImportError:
            return
        try:
            parse_targets([dict(a) for a in spec.alerts])
        except ValueError as exc:
            m = re.search(r"alerts\[(\d+)\]", str(exc))
            raise spec.error(("alerts", int(m.group(1))) if m else ("alerts",), str(exc)) from None


def check_name(spec: MonitorSpec, engine: Any) -> None:
    owned = {m.get("name") for m in _monitors(engine)}
    if engine.event_inputs(spec.name) is not None and spec.name not in owned:
        raise spec.error(("name",), f"an event-query named {spec.name!r} is already deployed (not by a monitor)")


def _monitors(engine: Any) -> list[dict]:
    fn = getattr(engine, "monitors", None)
    try:
        return list(fn()) if callable(fn) else []
    except Exception:
        return []


def known_streams(spec: MonitorSpec, engine: Any) -> set[str]:
    """The streams history SQL may read once the monitor is deployed."""
    known = {s.name for s in engine.archive.streams()} | {s.name for s in spec.sources}
    known |= set(spec.streams_written())
    known |= {str(t.get("name")) for t in spec.reference_tables}
    return known


def validate(spec: MonitorSpec, engine: Any) -> Checked:
    """Check ``spec`` against ``engine`` without changing it; returns what was learned
    (used by :func:`moirae.monitors.apply.deploy`). Raises :class:`MonitorFileError`."""
    out = Checked()
    check_sections(spec, engine, out)
    check_name(spec, engine)
    check_sources(spec, engine, out)
    check_event_query(spec, engine, out)
    known = known_streams(spec, engine)
    check_contexts(spec, engine, out, known)
    check_recalls(spec, out, known)
    check_similarity(spec, out)
    check_incidents(spec, out, known)
    return out
