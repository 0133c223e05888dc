"""Context-queries of one batch run side by side (moirae.queries.context.ContextRunner)."""

from __future__ import annotations

import threading
import time

import pytest

from moirae.queries.context import ContextRunner


def test_they_overlap_and_results_keep_the_queries_order():
    runner = ContextRunner()
    together = threading.Barrier(3)

    def one(cq):  # each waits for the other two: run one after another, this would time out
        together.wait(timeout=10)
        time.sleep(0.01 * (3 - cq))  # the first query finishes last
        return f"rows of {cq}"

    try:
        out = runner.run([0, 1, 2], one)
    finally:
        runner.close()
    assert list(out) == [0, 1, 2]
    assert out == {0: "rows of 0", 1: "rows of 1", 2: "rows of 2"}


def test_a_failure_is_raised_after_the_others_are_done():
    runner = ContextRunner()
    finished = []

    def one(cq):
        if cq == "bad":
            raise ValueError("context-query 'bad' failed")
        time.sleep(0.2)
        finished.append(cq)
        return cq

    try:
        with pytest.raises(ValueError, match="'bad'"):
            runner.run(["bad", "slow1", "slow2"], one)
        assert sorted(finished) == ["slow1", "slow2"]  # not left running after the error
    finally:
        runner.close()


def test_a_single_query_runs_in_the_callers_thread():
    runner = ContextRunner()
    try:
        assert runner.run(["only"], lambda cq: threading.current_thread().name) == {"only": threading.current_thread().name}
        assert runner.run([], lambda cq: 1) == {}
    finally:
        runner.close()
