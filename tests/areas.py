"""The suite's run policy, a pytest plugin loaded by ``tests/conftest.py``.

- **Markers from fixtures.** A test whose fixture closure holds a fixture of
  :data:`FIXTURE_MARKS` (``spark``, ``pg``/``pg_dsn``, ...) gets that fixture's markers,
  and a test under a folder of :data:`FOLDER_MARKS` gets the folder's: nobody has to
  remember ``@pytest.mark.spark``. A test that starts Spark or PostgreSQL only in a child
  process declares it with a module-level ``pytestmark``.
- **The quick guard.** Under ``MOIRAE_TEST_QUICK=1`` (``make test-quick``) a test that
  starts a JVM or a PostgreSQL server, or connects to PostgreSQL, fails: the quick
  selection stays free of both. Child processes inherit a ``SPARK_HOME`` that holds no
  Spark, so a JVM started by a child fails as well.
- **Skipped areas.** Every skip is counted per area (:func:`area`) and the counts end the
  terminal summary. Under ``CI=true`` a skip in an area this machine can run
  (:data:`RUNNABLE`) is a failure, unless its reason is one of :data:`BY_DESIGN`.
- **Enough examples.** Under ``CI=true`` a Hypothesis property over Spark or PostgreSQL
  (its fixture closure holds ``spark`` or ``pg_dsn``) runs at least
  :data:`CI_MIN_EXAMPLES` examples, unless listed in :data:`CI_EXAMPLES_EXEMPT`.
- **Longest first.** Modules holding a ``slow`` test run first, then those starting
  Spark, then the rest (each module's tests together, in their order).
- **Two passes.** A test under a path of :data:`ALONE` is marked ``alone``: it acts on
  what concurrent tests share. ``MOIRAE_TEST_PART`` (set by :mod:`tests.run`, which
  ``make test`` calls) keeps one part of the selection: ``shared`` the others (run on
  several workers at once), ``alone`` these (run one at a time); unset, both.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter

import pytest

QUICK = os.environ.get("MOIRAE_TEST_QUICK") == "1"
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

#: fixture name -> the markers every test using it (directly or through another fixture) gets
FIXTURE_MARKS: dict[str, tuple[str, ...]] = {
    "spark": ("spark",),
    "pg_dsn": ("postgres",),  # ``pg`` and every fixture built on it depend on ``pg_dsn``
    "private_pg": ("postgres",),
    "live": ("spark", "postgres", "browser"),  # tests/browser: an engine child with its own JVM
    "browser": ("browser",),
}
#: folder (relative to the repository root) -> the markers of every test in it
FOLDER_MARKS: dict[str, tuple[str, ...]] = {
    "tests/browser/": ("browser",),
    "tests/cluster/": ("cluster", "spark", "postgres", "slow"),
}

#: paths (a folder or a module, relative to the repository root) whose tests must not run
#: beside others: they start a Spark standalone cluster (a master and two workers: the
#: machine's cores for minutes). The cancel tests count only their own sleeps. The
#: fault tests that stop or count the sessions of a server run on a private server per
#: worker (tests/faults/conftest.py), and fill only a tmpfs of their own.
ALONE: tuple[str, ...] = ("tests/cluster/",)
PART = os.environ.get("MOIRAE_TEST_PART", "")

#: areas a CI machine can run: a skip there hides a test that should have run
RUNNABLE = ("browser", "cluster", "disk pressure", "external PostgreSQL", "javac")
#: skip reasons that are a test's design (one backend is enough), not a missing area
BY_DESIGN = ("one backend is enough", "the process-kill test runs on the embedded backend only")

CI_MIN_EXAMPLES = 20
#: properties whose every example starts and stops Spark work in a child process or a
#: streaming query: the floor would cost minutes of the CI budget (node id without params)
CI_EXAMPLES_EXEMPT = {
    "tests/archive/test_exec_sink.py::test_sigkill_between_partition_copies_then_replay_equals_source":
        "one Spark child process started and SIGKILLed per example",
    "tests/archive/test_shared_writer.py::test_replay_after_a_partition_committed_and_failed_archives_each_row_once":
        "one streaming query run, failed and replayed per example",
    "tests/archive/test_exec_sink.py::test_replay_after_an_executor_failed_midway_archives_each_row_once":
        "one streaming query run, failed on an executor and replayed per example",
    "tests/ananke/test_ankn_props.py::test_ankn_delivers_ank1s_graph_over_random_streams":
        "three streaming queries (ANK-1's two sinks, ANK-N's one) run to their end per example",
}

_FORBIDDEN_EXES = {"java", "spark-submit", "spark-class", "postgres", "pg_ctl", "initdb"}
_violations: list[str] = []


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        path = item.nodeid.split("::", 1)[0]
        if path.startswith(ALONE):
            item.add_marker("alone")
        marks = [m for name, ms in FIXTURE_MARKS.items() if name in names for m in ms]
        marks += [m for folder, ms in FOLDER_MARKS.items() if path.startswith(folder) for m in ms]
        for mark in dict.fromkeys(marks):
            if item.get_closest_marker(mark) is None:
                item.add_marker(mark)
        if CI and names & {"spark", "pg_dsn"}:
            _at_least_ci_examples(item)
    _longest_first(items)
    if PART in ("shared", "alone"):
        wanted = PART == "alone"
        keep = [item for item in items if (item.get_closest_marker("alone") is not None) == wanted]
        dropped = [item for item in items if (item.get_closest_marker("alone") is not None) != wanted]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep


def _longest_first(items) -> None:
    """Order the modules by their likely length, keeping each module's tests together and
    in order: those holding a ``slow`` test, then those starting Spark, then the rest. The
    workers take modules in this order (``--dist loadfile``), so the long ones start
    first and the last minutes are not one worker finishing a long module alone."""
    rank: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        r = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("spark") else 2
        rank[path] = min(rank.get(path, 2), r)
    first = {path: i for i, path in reversed(list(enumerate(item.nodeid.split("::", 1)[0] for item in items)))}
    items.sort(key=lambda item: (rank[p := item.nodeid.split("::", 1)[0]], first[p]))


def _at_least_ci_examples(item) -> None:
    """Raise a property's ``max_examples`` to :data:`CI_MIN_EXAMPLES` (its other settings kept)."""
    from hypothesis import settings

    test = getattr(item, "obj", None)
    if not getattr(test, "is_hypothesis_test", False) or item.nodeid.split("[", 1)[0] in CI_EXAMPLES_EXEMPT:
        return
    current = test._hypothesis_internal_use_settings  # read by Hypothesis when the test runs
    if current.max_examples < CI_MIN_EXAMPLES:
        test._hypothesis_internal_use_settings = settings(current, max_examples=CI_MIN_EXAMPLES)


def area(item) -> str:
    """The area a test belongs to, for the skip counts."""
    path = item.nodeid.split("::", 1)[0]
    callspec = getattr(item, "callspec", None)
    if item.get_closest_marker("browser"):
        return "browser"
    if item.get_closest_marker("cluster"):
        return "cluster"
    if path.endswith("test_disk_pressure.py"):
        return "disk pressure"
    if path.endswith("test_hadoop_fs.py"):
        return "javac"
    if callspec is not None and callspec.params.get("pg_dsn") == "external":
        return "external PostgreSQL"
    return "other"


def _reason(rep) -> str:
    longrepr = rep.longrepr
    text = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    rep = (yield).get_result()
    if _violations:
        what = "; ".join(dict.fromkeys(_violations))
        _violations.clear()
        rep.outcome, rep.longrepr = "failed", (
            f"make test-quick (MOIRAE_TEST_QUICK=1): this test {what}. Give it the fixture that "
            "marks it (spark, pg) or a module-level pytestmark (spark/postgres).")
        return
    if not rep.skipped or hasattr(rep, "wasxfail"):
        return
    where, reason = area(item), _reason(rep)
    by_design = any(text in reason for text in BY_DESIGN)
    rep.user_properties.append(("skip_area", "by design" if by_design else where))
    if CI and where in RUNNABLE and not by_design:
        rep.outcome, rep.longrepr = "failed", (
            f"CI: skipped in area '{where}', which this machine can run: {reason}")
        rep.user_properties.append(("ci_failed_skip", where))


def pytest_terminal_summary(terminalreporter, config):
    if config.option.collectonly:
        return
    counts: Counter[str] = Counter()
    for key in ("skipped", "failed", "error"):  # a skip failed by the CI policy in setup is an error
        for rep in terminalreporter.stats.get(key, []):
            props = dict(getattr(rep, "user_properties", ()))
            if "skip_area" in props:
                counts[props["skip_area"]] += 1
    shown = ", ".join(f"{a} {counts.get(a, 0)}" for a in (*RUNNABLE, "other", "by design"))
    terminalreporter.write_line(f"skips per area: {shown}" + (" (CI: a skip in a runnable area fails)"
                                                            if CI else ""))


class QuickModeViolation(RuntimeError):
    """A test of the quick selection started Spark or PostgreSQL."""


def _forbid(what: str) -> None:
    _violations.append(what)
    raise QuickModeViolation(f"make test-quick: this test {what}")


class _GuardedPopen(subprocess.Popen):
    """Popen refusing the executables of a JVM or a PostgreSQL server."""

    def __init__(self, args, *rest, **kwargs):
        first = args if isinstance(args, str | bytes | os.PathLike) else (list(args) or [""])[0]
        exe = os.path.basename(os.fsdecode(first).split()[0]) if os.fsdecode(first).strip() else ""
        if exe in _FORBIDDEN_EXES:
            _forbid(f"started {exe}")
        super().__init__(args, *rest, **kwargs)


def _guarded_connect(*args, **kwargs):
    _forbid("connected to PostgreSQL")


def pytest_configure(config):
    if not QUICK:
        return
    import psycopg2

    subprocess.Popen = _GuardedPopen
    psycopg2.connect = _guarded_connect
    # a child (``python -m ...``) starting Spark finds no spark-submit there and fails
    os.environ["SPARK_HOME"] = "/nonexistent/make-test-quick-starts-no-spark"
