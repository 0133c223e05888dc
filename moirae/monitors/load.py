"""Loading monitor files: YAML with lines, the published JSON Schema, the spec.

:func:`load` reads one file or every ``*.yaml`` / ``*.yml`` of a folder (sorted by
name); :func:`loads` parses text. Both check the file against ``monitor.schema.json``
(published beside this module, referenced by docs/MONITORS.md) and raise one
:class:`~moirae.monitors.errors.MonitorFileError` naming the file, the line and the key.
What needs an engine (streams, SQL, types) is checked by
:func:`moirae.monitors.validate.validate`.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from moirae.monitors.errors import MonitorFileError
from moirae.monitors.marked import Marked, parse
from moirae.monitors.spec import MonitorSpec, build_spec

SCHEMA_FILE = Path(__file__).with_name("monitor.schema.json")


@cache
def schema() -> dict[str, Any]:
    """The published JSON Schema of monitor files."""
    return json.loads(SCHEMA_FILE.read_text())


@cache
def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(schema())


def check_schema(doc: Marked) -> None:
    """Raise the first schema violation of ``doc`` (the deepest, earliest in the file)."""
    errors = list(_validator().iter_errors(doc.data))
    if not errors:
        return
    best = min(errors, key=lambda e: (doc.line(tuple(e.absolute_path)) or 0, -len(e.absolute_path)))
    path = tuple(best.absolute_path)
    if best.validator == "additionalProperties" and isinstance(best.instance, dict):
        allowed = set(best.schema.get("properties", {}))
        extra = [k for k in best.instance if k not in allowed]
        if extra:
            where = (*path, extra[0])
            hint = f"; allowed: {', '.join(sorted(allowed))}" if allowed else ""
            raise doc.error(where, f"unknown key {extra[0]!r}{hint}")
    if best.validator == "oneOf":
        raise doc.error(path, f"needs exactly one of {_alternatives(best)}")
    if best.validator == "required":
        raise doc.error(path, best.message)
    raise doc.error(path, best.message)


def _alternatives(err) -> str:
    names = [" + ".join(sub.get("required", ())) for sub in err.validator_value]
    return " or ".join(repr(n) for n in names)


def loads(text: str, origin: str = "<monitor>") -> MonitorSpec:
    """The monitor defined by ``text`` (``origin`` names it in errors)."""
    doc = parse(text, origin)
    if not isinstance(doc.data, dict):
        raise MonitorFileError("a monitor file is a mapping (name:, sources:, event_query:, ...)", file=origin,
                               line=1)
    check_schema(doc)
    return build_spec(doc, text)


def load(path: str | os.PathLike) -> list[MonitorSpec]:
    """The monitors of a file, or of every ``*.yaml`` / ``*.yml`` in a folder (sorted);
    two monitors of one name are an error."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file())
        if not files:
            raise MonitorFileError("no *.yaml monitor files in the folder", file=str(p))
    elif p.is_file():
        files = [p]
    else:
        raise MonitorFileError("no such file or folder", file=str(p))
    specs: list[MonitorSpec] = []
    for f in files:
        try:
            text = f.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise MonitorFileError(f"cannot read: {exc}", file=str(f)) from None
        spec = loads(text, str(f))
        twin = next((s for s in specs if s.name == spec.name), None)
        if twin is not None:
            raise spec.error(("name",), f"monitor {spec.name!r} is also defined in {twin.origin}")
        specs.append(spec)
    return specs
