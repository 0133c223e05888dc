"""The console: one HTML page, plain JavaScript, no build step; its sources are
``static/console.{html,css,js}``, inlined into one response.

It lists *incidents* live (``EventSource`` on ``/api/stream``; ``incident`` messages),
newest first, with status, severity, key, duration and alert count, filtered by status
and type, paged, each with a deep link (``#/incident/<id>``). An incident's view draws
the triggering metric around it with the threshold and the norm band (mean ± sd from
the ``norm`` Recall, refined live, with the history it covers), the current value in sd
above normal, the context as chips, the similar past incidents (score bar, date,
duration, resolution, shared terms, a "novel" badge), the history search's progress
with Accelerate and Cancel, and the provenance (collapsed). Acknowledge and Resolve
(with a note) act on the incident; feedback stays until dismissed, and errors are
said in words. ``#/archive`` shows chunks per stream and tier, rows, late rows and
dead letters. ``#/monitors`` lists the deployed monitors (version, state, rows/s,
alerts, open tasks, materialized span), deploys a pasted monitor file and undeploys one
(optionally dropping its archive).
"""

from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"


def render() -> str:
    html = (STATIC / "console.html").read_text(encoding="utf-8")
    css = (STATIC / "console.css").read_text(encoding="utf-8")
    js = (STATIC / "console.js").read_text(encoding="utf-8")
    return html.replace("/*CSS*/", css).replace("/*JS*/", js)


PAGE = render()
