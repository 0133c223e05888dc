"""A maintenance save of the similarity statistics never undoes a retraction's forget
(moirae/ingest/persist.py:save_operator, used by DeployManager.save_state and the
retraction's Effects._save_stats).

Real PostgreSQL and a real Similarity Recall. The interleaving is forced with events, no
sleeps: the maintenance save (``DeployManager.save_state``) takes its snapshot while the
alert 'e2' is still learned and stops there; the retraction forgets 'e2' and saves; only
then (once the retraction's save has finished, or is waiting for the operator's save
lock) does the maintenance save write. What is saved must be the statistics without
'e2', and 'e2' must not be among the saved learned ids."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest

from moirae.deploy.manager import DeployManager
from moirae.ingest import persist
from moirae.retract.effects import Effects
from tests.retract.test_similarity_forget import _op

pytestmark = [pytest.mark.postgres]

CTX = {"e1": [{"user": "alice", "proc": "backup"}], "e2": [{"user": "miner", "proc": "xmrig"}],
       "e3": [{"user": "alice", "proc": "cron"}]}


class _Probe:
    """The operator's save lock, telling ``entered`` when the retraction's thread asks for it."""

    def __init__(self, thread_name: str, entered: threading.Event) -> None:
        self._lock = threading.Lock()
        self._name, self._entered = thread_name, entered

    def __enter__(self):
        if threading.current_thread().name == self._name:
            self._entered.set()
        self._lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()


def test_a_maintenance_save_never_writes_its_stale_snapshot_over_a_forget(pg, monkeypatch):
    op = _op()
    persist.ensure_similarity_tables(pg)
    op.learn_event("e1", CTX["e1"])
    DeployManager.save_state(SimpleNamespace(db=pg, deployed=SimpleNamespace(similarity={op.name: op})))
    op.learn_event("e2", CTX["e2"])
    op.learn_event("e3", CTX["e3"])

    took, go = threading.Event(), threading.Event()
    monkeypatch.setitem(persist._SAVE_LOCKS, op.name, _Probe("retraction", go))
    real_delta = op.state_delta

    def delta():
        out = real_delta()
        if threading.current_thread().name == "maintenance":
            took.set()  # the snapshot holds e2
            assert go.wait(30), "the retraction never saved nor waited for the save lock"
        return out

    monkeypatch.setattr(op, "state_delta", delta)
    errors: list[BaseException] = []

    def run(fn):
        def target():
            try:
                fn()
            except BaseException as exc:  # reported below
                errors.append(exc)
            finally:
                go.set()  # the retraction's save is done (without a save lock it never waits)
        return target

    maintenance = threading.Thread(name="maintenance", target=run(lambda: DeployManager.save_state(
        SimpleNamespace(db=pg, deployed=SimpleNamespace(similarity={op.name: op})))))
    maintenance.start()
    assert took.wait(30)
    assert op.forget_event("e2", CTX["e2"])  # the retraction withdrew e2 (Effects._stats)
    retraction = threading.Thread(name="retraction",
                                  target=run(lambda: Effects._save_stats(SimpleNamespace(db=pg), op, ["e2"])))
    retraction.start()
    retraction.join(60)
    maintenance.join(60)
    assert not errors, errors
    assert not retraction.is_alive() and not maintenance.is_alive()

    saved = persist.load_similarity(pg, op.name)
    assert "e2" not in saved["learned"] and "e1" in saved["learned"] and "e3" in saved["learned"]
    now = op.snapshot()["stats"]
    assert json.loads(json.dumps(saved["stats"], default=str)) == json.loads(json.dumps(now, default=str))
