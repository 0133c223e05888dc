"""Loading monitor files: the published schema, errors naming file, line and key, the
version of a definition (pure: no Spark, no PostgreSQL)."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest

from moirae.monitors import MonitorFileError, load, loads, schema

ROOT = Path(__file__).resolve().parents[2]

BASE = """\
name: busy
description: x
sources:
  m:
    kind: rate
    options: {rowsPerSecond: 2}
    lateness: 5 seconds
event_query:
  sql: SELECT 1
similarity:
  k: 3
"""


def _err(text: str) -> MonitorFileError:
    with pytest.raises(MonitorFileError) as err:
        loads(text, "m.yaml")
    return err.value


def test_the_published_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(schema())


def test_version_ignores_layout_and_follows_values():
    spec = loads(BASE)
    relaid = "# a comment\n" + BASE.replace("similarity:\n  k: 3\n", "similarity: {k: 3}\n")
    assert loads(relaid).version == spec.version
    assert loads(BASE.replace("k: 3", "k: 4")).version != spec.version
    assert spec.source_text == BASE and spec.name == "busy"


@pytest.mark.parametrize("text, line, key, says", [
    (BASE.replace("description: x", "descripton: x"), 2, "descripton", "unknown key 'descripton'"),
    (BASE.replace("    lateness: 5 seconds", "    latness: 5 seconds"), 7, "sources.m.latness", "unknown key"),
    (BASE.replace("  k: 3", "  k: three"), 11, "similarity.k", "not of type 'integer'"),
    (BASE + "name: again\n", 12, "name", "appears twice"),
    (BASE.replace("  sql: SELECT 1", "  sql: SELECT 1\n  python: a.b:c"), 8, "event_query", "exactly one of"),
    (BASE.replace("name: busy", "name: Busy-Zone"), 1, "name", "does not match"),
    (BASE.replace("    kind: rate\n", ""), 4, "sources.m", "'kind' is a required property"),
])
def test_errors_name_the_file_line_and_key(text, line, key, says):
    e = _err(text)
    assert (e.file, e.line, e.key) == ("m.yaml", line, key), str(e)
    assert says in str(e) and str(e).startswith(f"m.yaml:{line}: key {key!r}:")


def test_bad_yaml_names_its_line():
    e = _err(BASE.replace("  k: 3", "  k: [3"))
    assert e.line is not None and e.line >= 11 and "not valid YAML" in str(e)


def test_a_folder_loads_sorted_and_refuses_two_monitors_of_one_name(tmp_path):
    (tmp_path / "b.yaml").write_text(BASE)
    (tmp_path / "a.yml").write_text(BASE.replace("name: busy", "name: calm"))
    (tmp_path / "notes.txt").write_text("not a monitor")
    assert [s.name for s in load(tmp_path)] == ["calm", "busy"]
    (tmp_path / "c.yaml").write_text(BASE)
    with pytest.raises(MonitorFileError, match=r"c\.yaml:1: key 'name': monitor 'busy' is also defined in .*b\.yaml"):
        load(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MonitorFileError, match="no \\*.yaml monitor files"):
        load(empty)


def test_the_documented_example_and_the_builtin_files_load():
    doc = (ROOT / "docs" / "MONITORS.md").read_text()
    example = re.search(r"## A complete example\n\n```yaml\n(.*?)```", doc, re.S).group(1)
    spec = loads(example, "MONITORS.md")
    assert spec.name == "hot_room" and [r.name for r in spec.recalls] == ["norm"]
    assert spec.streams_written() == ["ev_hot_room", "cx_hot_room_visitors"]
    assert spec.operators() == ["norm", "similar"]
    names = {s.origin.split("/")[-2]: s for d in ("cluster", "host") for s in load(ROOT / "config" / "monitors" / d)}
    assert set(names) == {"cluster", "host"} and {s.name for s in names.values()} == {"overload"}
