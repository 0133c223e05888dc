"""docs/ARCHITECTURE.md stays true: every file and name it cites exists.

A citation is a code span holding a repository path (``archive/tiers.py``, a folder
``moirae/ingest/``), optionally followed by ``:`` and a dotted name defined in that
Python file (``archive/tiers.py:demote``, ``recall/manager.py:RecallManager.submit``,
``moirae/api/app.py:create_app.require_token`` for a nested function). A name is
defined by a ``def``, a ``class``, an assignment or an annotated field at that level.
The doc also keeps answering the newcomer's questions it ends with.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"

_SPAN = re.compile(r"`([^`\n]+)`")
_CITATION = re.compile(r"^(?P<path>[A-Za-z0-9_.\-/]+?(?:/|\.(?:py|js|html|css|md|yaml|toml)))"
                       r"(?::(?P<name>[A-Za-z_][A-Za-z0-9_.]*))?$")
#: Files at the repository's root the doc may cite by bare name (a bare ``errors.py``
#: means "each package's", not a file).
ROOT_FILES = ("pyproject.toml", "README.md", "BENCHMARKS.md", "Makefile")
QUESTIONS = (
    "Where are stride tickets deducted?",
    "Where is a chunk demoted?",
    "Where is a similarity score explained?",
    "Where does the API check a token?",
    "Where does a late row go?",
)


def citations(text: str) -> list[tuple[str, str | None]]:
    """The (path, dotted name or None) pairs cited in ``text``, in order, once each.

    >>> citations("see `archive/tiers.py:demote`, `moirae/ingest/` and `pyproject.toml`, not `abc.py` or `x = 1`")
    [('archive/tiers.py', 'demote'), ('moirae/ingest/', None), ('pyproject.toml', None)]
    """
    out: dict[tuple[str, str | None], None] = {}
    for span in _SPAN.findall(text):
        m = _CITATION.match(span.strip())
        if m and ("/" in m["path"] or m["path"] in ROOT_FILES):
            out[(m["path"], m["name"])] = None
    return list(out)


def _defined(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a block of statements defines, each to its node."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.If | ast.Try):  # definitions under a condition count too
            names.update(_defined(node.body))
    return names


@cache
def _module(path: str) -> ast.Module:
    return ast.parse((ROOT / path).read_text(encoding="utf-8"))


def resolves(path: str, dotted: str) -> bool:
    """Whether ``dotted`` (``f``, ``C.m``, ``f.inner``) is defined in the Python file ``path``."""
    node: ast.AST = _module(path)
    for part in dotted.split("."):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            return False
        found = _defined(body).get(part)
        if found is None:
            return False
        node = found
    return True


def dead_citations(text: str) -> list[str]:
    """Every citation in ``text`` whose file or name does not exist, as written."""
    dead = []
    for path, name in citations(text):
        target = ROOT / path
        exists = target.is_dir() if path.endswith("/") else target.is_file()
        if not exists:
            dead.append(f"{path}{':' + name if name else ''} (no such {'folder' if path.endswith('/') else 'file'})")
        elif name and (not path.endswith(".py") or not resolves(path, name)):
            dead.append(f"{path}:{name} (no such name in {path})")
    return dead


def test_the_doc_exists_and_cites_code():
    assert DOC.is_file(), "docs/ARCHITECTURE.md is missing"
    assert len(citations(DOC.read_text(encoding="utf-8"))) > 50


def test_every_citation_is_alive():
    dead = dead_citations(DOC.read_text(encoding="utf-8"))
    assert not dead, "docs/ARCHITECTURE.md cites what is gone:\n  " + "\n  ".join(dead)


@pytest.mark.parametrize("question", QUESTIONS)
def test_the_newcomers_questions_are_answered_with_a_file_and_a_function(question):
    text = DOC.read_text(encoding="utf-8")
    assert question in text, f"the doc no longer asks {question!r}"
    answer = text.split(question, 1)[1].split("\n**", 1)[0]
    assert any(name for _, name in citations(answer)), f"{question!r} is answered without a file:function"


def test_the_checker_finds_a_dead_citation():
    assert dead_citations("`archive/tiers.py:no_such_function` and `no/such/file.py`") == [
        "archive/tiers.py:no_such_function (no such name in archive/tiers.py)",
        "no/such/file.py (no such file)",
    ]
    assert dead_citations("`archive/tiers.py:demote`") == []


def test_this_modules_examples_run():
    import doctest
    import sys

    result = doctest.testmod(sys.modules[__name__])
    assert result.attempted and not result.failed
