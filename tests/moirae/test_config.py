"""Configuration: documented defaults, typed settings, errors that name the key and file."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import yaml

from moirae import config


def test_defaults_load_typed_and_frozen():
    s = config.load()
    assert s.archive.chunk_span == timedelta(hours=1)
    assert s.archive.settings().statement_timeout_ms == 30_000
    assert s.api.loopback
    with pytest.raises(AttributeError):
        s.archive.recent_chunks = 3  # frozen


def test_every_default_key_is_documented_in_the_file():
    """Each key line of config/moirae.yaml is preceded by a comment (or has one beside it)."""
    lines = config.DEFAULTS.read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)([a-z_]+):(.*)$", line)
        if not m:
            continue
        documented = "#" in m.group(3) or (i > 0 and lines[i - 1].strip().startswith("#"))
        section = m.group(3).strip() == ""
        assert documented or section, f"config key {m.group(2)!r} (line {i + 1}) has no comment"


def test_every_settings_field_has_a_default_in_the_file():
    data = yaml.safe_load(config.DEFAULTS.read_text())
    s = config.load()
    for section in ("spark", "postgres", "archive", "recall", "similarity", "ananke", "api"):
        fields = set(getattr(s, section).__dataclass_fields__)
        assert fields == set(data[section]), section


@pytest.mark.parametrize("text, key", [
    ("archive:\n  chunk_spam: 1h\n", "archive.chunk_spam"),
    ("archive:\n  chunk_span: soon\n", "archive.chunk_span"),
    ("archive:\n  recent_chunks: -1\n", "archive.recent_chunks"),
    ("recall:\n  max_concurrent: two\n", "recall.max_concurrent"),
    ("recall:\n  materialization_load_threshold: 2\n", "recall.materialization_load_threshold"),
    ("spark:\n  ui: maybe\n", "spark.ui"),
    ("spark:\n  stop_grace: -1\n", "spark.stop_grace"),
    ("api:\n  port: 70000\n", "api.port"),
    ("api:\n  host: 0.0.0.0\n", "api.host"),
    ("ananke:\n  variant: ank7\n", "ananke.variant"),
    ("scenario: moon\n", "scenario"),
    ("nonsense: 1\n", "nonsense"),
])
def test_bad_values_name_the_key_and_the_file(tmp_path, text, key):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(config.ConfigError) as err:
        config.load(f)
    assert key in str(err.value)
    assert str(f) in str(err.value)


def test_user_file_merges_over_defaults(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("archive:\n  chunk_span: 10m\napi:\n  host: 0.0.0.0\n  token: s3cret\n")
    s = config.load(f)
    assert s.archive.chunk_span == timedelta(minutes=10)
    assert s.archive.recent_chunks == 24  # untouched default
    assert not s.api.loopback and s.api.token == "s3cret"


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.load(tmp_path / "nope.yaml")
    f = tmp_path / "broken.yaml"
    f.write_text("archive: [unclosed\n")
    with pytest.raises(config.ConfigError, match="not valid YAML"):
        config.load(f)
