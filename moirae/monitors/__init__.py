"""Monitor files: a whole monitor declared in YAML, validated, and deployed on an engine
(docs/MONITORS.md; the JSON Schema is ``moirae/monitors/monitor.schema.json``).

>>> from moirae.monitors import loads
>>> m = loads('''
... name: hot
... sources:
...   temps: {kind: file, options: {path: /data/temps}, schema: {room: string, c: double, ts: timestamp}}
... event_query:
...   sql: |
...     SELECT room, window_time(window) AS ts, avg(c) AS avg_c, concat_ws(':', room, date_format(window_time(window), 'HHmm')) AS eid
...     FROM temps GROUP BY window(ts, '10 minutes'), room HAVING avg(c) > 30
... ''', "hot.yaml")
>>> m.name, m.streams_written(), len(m.version)
('hot', ['ev_hot'], 16)
"""

from moirae.monitors.abc import MonitorHost
from moirae.monitors.apply import applier, deploy, loader_for
from moirae.monitors.errors import MonitorFileError, MonitorUnavailable, UnsupportedSql
from moirae.monitors.load import SCHEMA_FILE, load, loads, schema
from moirae.monitors.spec import MonitorSpec
from moirae.monitors.sqlquery import CompiledQuery, compile_sql
from moirae.monitors.validate import validate

__all__ = [
    "SCHEMA_FILE", "CompiledQuery", "MonitorFileError", "MonitorHost", "MonitorSpec", "MonitorUnavailable",
    "UnsupportedSql", "applier", "compile_sql", "deploy", "load", "loader_for", "loads", "schema", "validate",
]
