"""``recall``'s front door: every public name resolves, and importing the package is light."""

from __future__ import annotations

import subprocess
import sys

import recall


def test_every_public_name_resolves():
    for name in recall.__all__:
        assert getattr(recall, name).__name__ == name


def test_import_loads_no_heavy_dependency():
    code = ("import sys, recall; heavy = {'pandas', 'sqlglot', 'psycopg2', 'numpy'} & set(sys.modules); "
            "print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
