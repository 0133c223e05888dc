"""Redaction (moirae.base.redact): every DSN shape libpq accepts loses its password and
keeps the rest, wherever in a message it sits. Pure and fast: many examples."""

from __future__ import annotations

import urllib.parse

import psycopg2.extensions
from hypothesis import given, settings
from hypothesis import strategies as st

from moirae.base.redact import MASK, redact, redact_all

# passwords with what makes quoting hard: blanks, quotes, backslashes, '@', ':', '=', unicode
PASSWORDS = st.text(st.sampled_from("aZ9 '\\@:=/%#?&;\"é€x"), min_size=1, max_size=16).filter(
    lambda p: p.strip() == p or "'" in p or " " in p)
NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
HOSTS = st.sampled_from(["db", "127.0.0.1", "pg.example.com", "/var/run/postgresql"])
KEYS = st.sampled_from(["password", "sslpassword"])  # libpq keys are lower-case
WRAP = st.sampled_from(["{}", "cannot connect to PostgreSQL at {}: timeout", "DSN '{}' failed", "({})",
                        "MOIRAE_PG_DSN={}"])


def libpq_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def libpq_plain(value: str) -> str | None:
    """``value`` unquoted (backslash-escaped), or None when libpq needs it quoted."""
    if value.startswith("'") or any(c.isspace() for c in value):
        return None
    return value.replace("\\", "\\\\")


@settings(max_examples=200, deadline=None)
@given(pw=PASSWORDS, user=NAMES, host=HOSTS, db=NAMES, key=KEYS, wrap=WRAP, quoted=st.booleans(),
       spaces=st.sampled_from(["=", " = ", "= "]))
def test_keyword_dsn_loses_its_password_and_keeps_the_rest(pw, user, host, db, key, wrap, quoted, spaces):
    value = libpq_quote(pw) if quoted or libpq_plain(pw) is None else libpq_plain(pw)
    dsn = f"host={host} user={user} {key}{spaces}{value} dbname={db}"
    assert psycopg2.extensions.parse_dsn(dsn)[key.lower()] == pw  # a DSN libpq reads as meant
    text = wrap.format(dsn)
    out = redact(text)
    assert out == wrap.format(f"host={host} user={user} {key}{spaces}{MASK} dbname={db}")
    assert redact(out) == out


@settings(max_examples=150, deadline=None)
@given(pw=PASSWORDS, user=NAMES, host=st.sampled_from(["db", "127.0.0.1:5432", "[::1]:5433"]), db=NAMES,
       scheme=st.sampled_from(["postgresql", "postgres"]), wrap=WRAP, encoded=st.booleans())
def test_url_dsn_loses_its_password(pw, user, host, db, scheme, wrap, encoded):
    secret = urllib.parse.quote(pw, safe="") if encoded or any(c in pw for c in " /?#%") else pw
    dsn = f"{scheme}://{user}:{secret}@{host}/{db}?sslmode=disable"
    out = redact(wrap.format(dsn))
    assert out == wrap.format(f"{scheme}://{user}:{MASK}@{host}/{db}?sslmode=disable")


@settings(max_examples=100, deadline=None)
@given(pw=st.text(st.sampled_from("aZ9-_.~"), min_size=1, max_size=12), user=NAMES, db=NAMES)
def test_url_query_password_and_env_forms(pw, user, db):
    assert redact(f"postgresql:///{db}?user={user}&password={pw}&sslmode=require") == \
        f"postgresql:///{db}?user={user}&password={MASK}&sslmode=require"
    assert redact(f"PGPASSWORD={pw} MOIRAE_API_TOKEN={pw} psql") == f"PGPASSWORD={MASK} MOIRAE_API_TOKEN={MASK} psql"
    assert redact(f"{{'user': '{user}', 'password': '{pw}'}}") == f"{{'user': '{user}', 'password': '{MASK}'}}"
    assert redact(f"Authorization: Bearer {pw}") == f"Authorization: Bearer {MASK}"


def test_nothing_secret_is_left_alone():
    for text in ("host=db user=moirae dbname=m", "postgresql://db/m", "bypass=3 passes", "compass=north",
                 "missing or wrong bearer token"):
        assert redact(text) == text
    assert redact_all({"a": ["password=x"], "b": 2}) == {"a": [f"password={MASK}"], "b": 2}
