"""Every docstring example in the packages runs (STYLE.md: "give an example, and doctest
it"). One test per module, so a failing example names its module.

A run that finds no example passes vacuously, so the examples are also counted: the
modules in :data:`WITH_EXAMPLES` must have every example written in their docstrings
(counted from the source, with :mod:`ast`) actually attempted by doctest, at least one;
every other module must have none. An example doctest would not collect (a docstring of
an object defined under a condition, or imported under another module's name) fails
here instead of silently not running, and a module that gains examples is listed.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("scheduler", "similarity", "archive", "ananke", "recall", "moirae")

#: The modules whose docstrings hold examples (each must run at least one).
WITH_EXAMPLES = frozenset("""
ananke.ank1 ananke.digest ananke.graph ananke.ids ananke.items ananke.spark_adapter ananke.store
ananke.polynomial ananke.poly_condition ananke.poly_eval ananke.poly_maint ananke.poly_store ananke.poly_writer ananke.ankn
archive.abc archive.chunk_copy archive.chunks archive.contributors archive.copy archive.exec_sink archive.exec_stream archive.exec_udf archive.history archive.history_plan archive.index_claims archive.names archive.pg archive.row_flags archive.schema archive.shared archive.stage_read archive.types archive.validate
moirae.base.durations moirae.base.errors moirae.base.lazy moirae.base.redact moirae.errors moirae.api.app moirae.api.auth moirae.api.guard moirae.api.sse moirae.api.access moirae.api.limits moirae.config moirae.queries.context_sql moirae.monitors moirae.monitors.errors moirae.monitors.marked moirae.monitors.sqlquery moirae.sources.kinds moirae.runtime.errorlog moirae.ingest.event_worker moirae.runtime.idle moirae.incidents.store moirae.retract.partials
moirae.sources.analyze moirae.sources.cluster moirae.sources.cluster_config moirae.sources.disorder
moirae.sources.maritime moirae.sources.maritime_geo moirae.sources.maritime_track moirae.sources.maritime_patterns moirae.sources.maritime_source
moirae.sources.payloads moirae.delivery.errors moirae.delivery.payloads moirae.delivery.signing moirae.delivery.targets moirae.deploy.lifecycle
moirae.sources.errors moirae.sources.bounds moirae.sources.pacing moirae.sources.replay moirae.runtime.supervise moirae.runtime.python_launcher moirae.incidents.resolution_cache moirae.incidents.rules moirae.read.views moirae.runtime.worker_daemon
recall.aggregate recall.aggregate_expr recall.operator recall.outputs recall.revision_ops
recall.similarity_incidents recall.specs recall.split recall.task
scheduler.clock scheduler.config scheduler.errors scheduler.events scheduler.fairness scheduler.fifo scheduler.model
scheduler.scheduler scheduler.stride scheduler.tickets
similarity similarity.config similarity.explain similarity.idf similarity.incidents similarity.learned similarity.novelty similarity.scorer similarity.search
similarity.index_cache similarity.index_codec similarity.stats similarity.synopsis similarity.terms similarity.topk
similarity.vocabulary similarity.index moirae.queries.context
archive.reference moirae.rules.book moirae.rules.norm
moirae.retract.errors moirae.retract.predicate moirae.retract.flagged moirae.cli.commands.lookup moirae.ingest.persist
moirae.patterns.bound moirae.patterns.compile moirae.patterns.errors moirae.patterns.evaluate moirae.patterns.expr moirae.patterns.lexer moirae.patterns.statement moirae.patterns.syntax
moirae.patterns.spark_schema moirae.patterns.spark_core moirae.patterns.spark_buffer moirae.patterns.spark_frame moirae.monitors.pattern_sql
""".split())


def _modules():
    for pkg in PACKAGES:
        yield pkg
        for info in pkgutil.walk_packages([str(ROOT / pkg)], prefix=f"{pkg}."):
            yield info.name


def written_examples(path: Path) -> int:
    """How many examples the docstrings in the file at ``path`` hold (module, classes,
    functions, at any depth), as doctest's parser reads them."""
    parser = doctest.DocTestParser()
    n = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                n += len(parser.get_examples(doc))
    return n


MODULES = sorted(_modules())


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} doctest example(s) failed in {name}"
    written = written_examples(Path(module.__file__))
    if name in WITH_EXAMPLES:
        assert written > 0, f"{name} is listed in WITH_EXAMPLES but its docstrings hold no example"
        assert result.attempted == written, (f"{name}: {written} example(s) written in its docstrings, "
                                             f"{result.attempted} run by doctest")
    else:
        assert written == result.attempted == 0, (f"{name} has {written} docstring example(s) "
                                                  f"(doctest ran {result.attempted}): add it to WITH_EXAMPLES")


def test_the_list_names_real_modules():
    assert WITH_EXAMPLES <= set(MODULES), sorted(WITH_EXAMPLES - set(MODULES))


def test_an_example_doctest_cannot_collect_is_caught(tmp_path):
    """The counting this file relies on sees an example doctest.testmod misses: one in a
    function defined inside another (not a module attribute)."""
    src = tmp_path / "hidden_example.py"
    src.write_text('"""Module.\n\n>>> 1 + 1\n2\n"""\n\n\ndef outer():\n    def inner():\n'
                   '        """>>> 2 + 2\n        4\n        """\n    return inner\n')
    import importlib.util

    spec = importlib.util.spec_from_file_location("hidden_example", src)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert doctest.testmod(module, verbose=False).attempted == 1
    assert written_examples(src) == 2
