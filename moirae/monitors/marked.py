"""YAML with line numbers: a monitor file's data and the line of every key and item.

PyYAML composes the document into nodes that keep their marks; this module constructs
the plain data from them (safe types only) and records, for every path (a tuple of
keys and list indexes), the 1-based line where it starts. A repeated key is an error
(PyYAML would keep the last one silently).

>>> doc = parse("name: a\\nsources:\\n  m:\\n    kind: rate\\n", "x.yaml")
>>> doc.data["sources"]["m"]["kind"], doc.line(("sources", "m", "kind"))
('rate', 4)
>>> doc.line(("sources", "m", "nope"))  # the nearest known ancestor
3
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from moirae.monitors.errors import MonitorFileError

Path = tuple[Any, ...]


@dataclass
class Marked:
    """A parsed document: ``data``, each path's line, and each scalar's first content line."""

    origin: str
    data: Any
    lines: dict[Path, int] = field(default_factory=dict)
    #: for a scalar value, the line its text starts on (a block scalar's: the line after ``|``)
    text_lines: dict[Path, int] = field(default_factory=dict)

    def line(self, path: Path) -> int | None:
        """The line of ``path``, else of its nearest ancestor that has one."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), None)

    def error(self, path: Path, message: str, cls: type[MonitorFileError] = MonitorFileError,
              line: int | None = None) -> MonitorFileError:
        """An error naming this file, the line of ``path`` (or ``line``) and the key."""
        key = ".".join(str(p) for p in path) or None
        return cls(message, file=self.origin, line=line or self.line(path), key=key)


def parse(text: str, origin: str) -> Marked:
    """Parse ``text`` (one YAML document); raises :class:`MonitorFileError` on bad YAML."""
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise MonitorFileError(f"not valid YAML: {exc.problem or exc}", file=origin,
                               line=None if mark is None else mark.line + 1) from None
    except yaml.YAMLError as exc:
        raise MonitorFileError(f"not valid YAML: {exc}", file=origin) from None
    doc = Marked(origin, None)
    if node is None:
        raise MonitorFileError("the file is empty", file=origin, line=1)
    doc.lines[()] = node.start_mark.line + 1
    doc.data = _build(node, (), doc, yaml.SafeLoader(""))
    return doc


def _build(node: yaml.Node, path: Path, doc: Marked, ctor: yaml.SafeLoader) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise MonitorFileError("a key must be a plain value", file=doc.origin,
                                       line=key_node.start_mark.line + 1)
            key = ctor.construct_object(key_node)
            if key == "<<":
                raise MonitorFileError("merge keys (<<) are not supported in monitor files", file=doc.origin,
                                       line=key_node.start_mark.line + 1)
            if key in out:
                raise MonitorFileError(f"key {key!r} appears twice", file=doc.origin,
                                       line=key_node.start_mark.line + 1, key=".".join(map(str, (*path, key))))
            doc.lines[(*path, key)] = key_node.start_mark.line + 1
            out[key] = _build(value_node, (*path, key), doc, ctor)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            doc.lines[(*path, i)] = item.start_mark.line + 1
            items.append(_build(item, (*path, i), doc, ctor))
        return items
    block = node.style in ("|", ">")
    doc.text_lines[path] = node.start_mark.line + 1 + (1 if block else 0)
    return ctor.construct_object(node, deep=True)
