"""Monitors on a running engine: deployed, updated and retired as one unit (M 4.2).

A *monitor* is a named group of sources, one event-query, its context-queries and its
Recall and Similarity Recall operators, declared together (a monitor file,
:mod:`moirae.monitors`, or Python). :class:`Lifecycle` keeps, per monitor, its name, its
version (a digest of its definition), its definition text, its state and what it
deployed, and persists the deployed set in ``moirae_monitors`` so a restart brings back
exactly that set.

- **Deploy** (:meth:`Lifecycle.deploy`): ``apply()`` declares the monitor through the
  engine's ordinary methods; what it registers (sources, event-queries, operators) is
  recorded as the monitor's. On a running engine its streaming queries start at once
  and its recent history is materialized at low priority (replica1, M 4.2). The same
  name and version again changes nothing; another version retires the old one (its
  archive kept, its event-query's checkpoint dropped: the query changed) and applies
  the new. A failing ``apply`` is undone whole and the previous version, if any, is
  applied again: a monitor is never half-deployed. Every event a monitor's event-query
  raises carries the monitor's name and version (``moirae_events.monitor``, ``version``).
- **Undeploy** (:meth:`Lifecycle.undeploy`): its event-queries are retired
  (:meth:`moirae.deploy.manager.DeployManager.remove_event_query`: streaming queries
  stopped between micro-batches, recall tasks cancelled, operators, indexes and
  connections freed), then its sources that no other event-query reads are stopped and
  unregistered. Archived streams stay unless ``drop_archive``. A source another monitor
  still reads stays, now that monitor's.
- A monitor's sources keep their own archive queries (no shared read, :mod:`archive.shared`),
  so retiring one monitor never stops the archive of another's input.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from psycopg2.extensions import make_dsn, parse_dsn

from archive.exec_sink import dsn_application_name, worker_application_name
from archive.schema import table_exists
from moirae.base.errors import MoiraeError
from moirae.ingest.sources import SourceRegistry

log = logging.getLogger(__name__)

__all__ = ["DEPLOYING", "FAILED", "RUNNING", "STOPPED", "Lifecycle", "Monitor", "MonitorError",
           "UnknownMonitor", "footprint", "leaks", "named_dsn", "stored_monitors"]

DEPLOYING, RUNNING, FAILED, STOPPED = "deploying", "running", "failed", "stopped"

#: how long retiring a monitor waits for a micro-batch in flight before stopping its
#: query inside it (``spark.stop_grace`` when smaller): a retired query's batch is not
#: replayed unless it is deployed again, from its checkpoint
UNDEPLOY_GRACE_S = 2.0

DDL = """
CREATE TABLE IF NOT EXISTS moirae_monitors (
    name        text PRIMARY KEY,
    version     text NOT NULL,
    text        text NOT NULL,
    state       text NOT NULL,
    deployed_at timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    error       text
);
"""


class MonitorError(MoiraeError):
    """A monitor could not be deployed or retired."""


class UnknownMonitor(MonitorError, LookupError):
    """No monitor of that name is deployed."""


def named_dsn(dsn: str, schema: str | None) -> str:
    """``dsn`` with an ``application_name`` naming the engine's schema (``moirae:<schema>``),
    unless it names one already: the engine's sessions are then found in
    ``pg_stat_activity`` (what a retired monitor must leave behind)."""
    try:
        if "application_name" in parse_dsn(dsn):
            return dsn
    except Exception:  # noqa: BLE001 - psycopg2 reports a bad DSN when it connects
        return dsn
    return make_dsn(dsn, application_name=application_name(schema))


def application_name(schema: str | None) -> str:
    return f"moirae:{schema or 'public'}"[:63]


@dataclass
class Monitor:
    """One deployed monitor and what it deployed."""

    name: str
    version: str
    text: str
    state: str = DEPLOYING
    deployed_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    event_queries: list[str] = field(default_factory=list)
    operators: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # sources it registered (and now owns)
    inputs: list[str] = field(default_factory=list)  # sources its event-queries read
    error: str | None = None
    apply: Callable[[], Any] | None = field(default=None, repr=False)
    before: tuple | None = field(default=None, repr=False)  # what existed when its apply began

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "state": self.state,
                "deployed_at": self.deployed_at.isoformat(), "event_queries": list(self.event_queries),
                "operators": list(self.operators), "sources": list(self.sources), "inputs": list(self.inputs),
                "error": self.error}


class MonitorTable:
    """``moirae_monitors``: the deployed set, one row per monitor, with its text."""

    def __init__(self, db) -> None:
        self.db = db
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute(DDL)

    def save(self, m: Monitor) -> None:
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO moirae_monitors (name, version, text, state, deployed_at, error) "
                        "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version, "
                        "text = EXCLUDED.text, state = EXCLUDED.state, deployed_at = EXCLUDED.deployed_at, "
                        "error = EXCLUDED.error, updated_at = now()",
                        (m.name, m.version, m.text, m.state, m.deployed_at, m.error))

    def set_state(self, name: str, state: str, error: str | None = None) -> None:
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("UPDATE moirae_monitors SET state = %s, error = %s, updated_at = now() WHERE name = %s",
                        (state, error, name))

    def delete(self, name: str) -> None:
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM moirae_monitors WHERE name = %s", (name,))

    def rows(self) -> list[dict[str, Any]]:
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT name, version, text, state, deployed_at, error FROM moirae_monitors ORDER BY name")
            cols = ("name", "version", "text", "state", "deployed_at", "error")
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


class Lifecycle:
    """The deployed monitors of one engine (module docstring). One deploy or undeploy
    at a time."""

    def __init__(self, deploy: Any, sources: SourceRegistry, db, grace_s: float) -> None:
        """``deploy`` is the engine's :class:`~moirae.deploy.manager.DeployManager`."""
        self.deploy_manager = deploy
        self.sources = sources
        self.db = db
        self.grace_s = min(grace_s, UNDEPLOY_GRACE_S)
        self.table = MonitorTable(db)
        self.monitors: dict[str, Monitor] = {}
        self._lock = threading.RLock()
        #: called with the event-queries about to be retired, before them: what the engine
        #: attached to them above the Deploy Manager (rules, alert routes) goes first
        self.on_retire: Callable[[list[str]], Any] | None = None

    # -- what exists ---------------------------------------------------------------------

    def _snapshot(self) -> tuple[set[str], set[str], set[str]]:
        d = self.deploy_manager
        return set(self.sources.by_name), set(d.event_queries), set(d.ops)

    def _attach(self, m: Monitor) -> None:
        """Record as ``m``'s what appeared since its apply began."""
        srcs, eqs, ops = self._snapshot()
        b_srcs, b_eqs, b_ops = m.before
        d = self.deploy_manager
        m.sources = sorted(srcs - b_srcs)
        m.event_queries = sorted(eqs - b_eqs)
        m.operators = sorted(ops - b_ops)
        m.inputs = sorted({s for q in m.event_queries for s in d.event_queries[q].inputs})

    # -- deploy --------------------------------------------------------------------------

    def deploy(self, name: str, version: str, text: str, apply: Callable[[], Any]) -> dict[str, Any]:
        """Deploy monitor ``name`` at ``version`` (module docstring). Returns ``result``
        (``deployed``, ``unchanged`` or ``updated``, with ``previous``), ``name``,
        ``version``, ``state`` and ``seconds``."""
        t0 = time.monotonic()
        with self._lock:
            old = self.monitors.get(name)
            if old is not None and old.version == version and old.state not in (FAILED,):
                return {"result": "unchanged", "name": name, "version": version, "state": self.state_of(old),
                        "seconds": round(time.monotonic() - t0, 3)}
            if old is not None:
                if old.event_queries or old.sources:
                    self._retire(old, fresh=True, drop_archive=False)
                del self.monitors[name]
            try:
                m = self._apply(name, version, text, apply)
            except BaseException:
                if old is not None and old.apply is not None and old.state != FAILED:
                    try:
                        self._apply(old.name, old.version, old.text, old.apply)
                    except Exception as exc:  # noqa: BLE001 - the first error is the one to report
                        log.error("monitor %r: re-applying version %s after a failed update failed too: %s",
                                  name, old.version, exc)
                        self.table.set_state(name, FAILED, f"{type(exc).__name__}: {exc}"[:500])
                raise
            out = {"result": "updated" if old is not None else "deployed", "name": name, "version": version,
                   "state": self.state_of(m), "seconds": round(time.monotonic() - t0, 3)}
            if old is not None:
                out["previous"] = old.version
            return out

    def _apply(self, name: str, version: str, text: str, apply: Callable[[], Any]) -> Monitor:
        d = self.deploy_manager
        m = Monitor(name, version, text, apply=apply, before=self._snapshot())
        self.monitors[name] = m
        d.deploying = (name, version)
        self.sources.sharing = False
        try:
            apply()
        except BaseException:
            if self.monitors.get(name) is m:  # not undone by the apply's own undo
                self._attach(m)
                try:
                    self._retire(m, fresh=True, drop_archive=False)
                finally:
                    del self.monitors[name]
            raise
        finally:
            d.deploying = None
            self.sources.sharing = True
        self._attach(m)
        for q in m.event_queries:
            d.deployed.monitor_of[q] = (name, version)
            if self.sources.started and q in d.resumed:  # this version's events archived, never recorded
                d.recover_flow(d.flows[q], queue=True)  # (a crash, an undeploy mid-batch)
        m.state = RUNNING if self.sources.started else STOPPED
        self.table.save(m)
        return m

    def restore(self, load: Callable[[str], tuple[str, str, Callable[[], Any]]]) -> list[dict[str, Any]]:
        """Deploy again every monitor ``moirae_monitors`` holds (after a restart):
        ``load(text)`` gives its name, version and apply. One that fails is kept in the
        table and shown as failed, with its error; the others are deployed."""
        out = []
        for row in self.table.rows():
            try:
                name, version, apply = load(row["text"])
                out.append(self.deploy(name, version, row["text"], apply))
            except Exception as exc:  # noqa: BLE001 - one bad monitor does not keep the others down
                err = f"{type(exc).__name__}: {exc}"[:500]
                log.error("monitor %r not restored: %s", row["name"], err)
                with self._lock:
                    self.monitors[row["name"]] = Monitor(row["name"], row["version"], row["text"], FAILED,
                                                         row["deployed_at"], error=err)
                self.table.set_state(row["name"], FAILED, err)
                out.append({"result": "failed", "name": row["name"], "version": row["version"], "error": err})
        return out

    # -- undeploy ------------------------------------------------------------------------

    def undeploy(self, name: str, drop_archive: bool = False) -> dict[str, Any]:
        """Retire monitor ``name`` (module docstring); :class:`UnknownMonitor` when none
        is deployed by that name. Returns what was retired and ``seconds``."""
        t0 = time.monotonic()
        with self._lock:
            m = self.monitors.get(name)
            if m is None:
                raise UnknownMonitor(f"no monitor named {name!r} is deployed (deployed: {sorted(self.monitors)})")
            if m.state == DEPLOYING:  # undone from inside its own apply: what it declared so far
                self._attach(m)
            retired = self._retire(m, fresh=drop_archive, drop_archive=drop_archive)
            del self.monitors[name]
            self.table.delete(name)
        return {"result": "undeployed", "name": name, "version": m.version, **retired,
                "seconds": round(time.monotonic() - t0, 3)}

    def _retire(self, m: Monitor, fresh: bool, drop_archive: bool) -> dict[str, Any]:
        d = self.deploy_manager
        read = {s for name, q in d.event_queries.items() if name not in m.event_queries for s in q.inputs}
        doomed = [s for s in m.sources if s not in read]
        kept = [s for s in m.sources if s in read]
        # its sources' archive queries stop while its event-queries do (each waits for a
        # micro-batch in flight: side by side, retiring takes the longest, not the sum)
        stopped: list[str] = []
        stopper = threading.Thread(target=lambda: stopped.extend(
            s for s in doomed if self.sources.remove(s, self.grace_s) is not None),
            name=f"moirae-retire-{m.name}", daemon=True)
        stopper.start()
        try:
            if self.on_retire is not None and m.event_queries:
                try:
                    self.on_retire(list(m.event_queries))
                except Exception as exc:  # noqa: BLE001 - retiring goes on: the queries must stop
                    log.warning("monitor %r: retiring what the engine attached to it failed: %s", m.name, exc)
            retired = [d.remove_event_query(q, fresh=fresh, drop_archive=drop_archive, grace=self.grace_s)
                       for q in m.event_queries if q in d.event_queries]
        finally:
            t0 = time.monotonic()
            stopper.join()
        dropped = [c for r in retired for c in r["dropped"]]
        for s in kept:  # another monitor's event-query reads it: it stays, that monitor's now
            owner = next((o for o in self.monitors.values() if o is not m
                          and any(s in d.event_queries[q].inputs for q in o.event_queries if q in d.event_queries)),
                         None)
            if owner is not None and s not in owner.sources:
                owner.sources.append(s)
        if drop_archive:
            for s in doomed:
                shutil.rmtree(self.sources.checkpoint_dir(s), ignore_errors=True)
                if d.archiver.drop_stream(s):
                    dropped.append(s)
        m.event_queries, m.operators, m.sources = [], [], kept
        phases = {k: v for r in retired for k, v in r["phases"].items()}
        phases["sources"] = round(time.monotonic() - t0, 3)
        return {"event_queries": [r["event_query"] for r in retired], "phases": phases,
                "operators": [o for r in retired for o in r["operators"]],
                "cancelled": {e: n for r in retired for e, n in r["cancelled"].items()},
                "sources_stopped": stopped, "sources_kept": kept, "dropped": dropped}

    # -- what the fronts show ---------------------------------------------------------------

    def state_of(self, m: Monitor, failures: dict[str, str] | None = None) -> str:
        """``deploying``, ``failed`` (a streaming query of it failed, or it could not be
        restored), ``stopped`` (the engine does not run) or ``running``."""
        if m.state in (DEPLOYING, FAILED):
            return m.state
        if not self.sources.started:
            return STOPPED
        failures = failures or {}
        d = self.deploy_manager
        for q in m.event_queries:
            flow = d.flows.get(q)
            if f"event_{q}" in failures or flow is None:
                return FAILED
            sq = flow.streaming
            try:
                if sq is not None and not sq.isActive and sq.exception() is not None:
                    return FAILED
            except Exception:  # noqa: BLE001 - the JVM side is going away
                pass
        return RUNNING

    def status(self, failures: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Per monitor: its summary, its live state, input rows per second of its
        event-queries' last micro-batch, alerts (this run and in the event log), open
        recall tasks and the span of history materialized for it."""
        d = self.deploy_manager
        with self._lock:
            monitors = list(self.monitors.values())
        alerts = self._alert_counts()
        tasks = d.manager.tasks()
        out = []
        for m in monitors:
            ours = {*m.operators, *(f"replica_{q}" for q in m.event_queries)}
            rate, seen = 0.0, 0
            for q in m.event_queries:
                flow = d.flows.get(q)
                if flow is None:
                    continue
                seen += flow.events_seen
                progress = flow.streaming.lastProgress if flow.streaming is not None else None
                rate += float((progress or {}).get("inputRowsPerSecond") or 0.0)
            open_tasks = sum(1 for t in tasks if t.operator in ours and t.ended_at is None)
            out.append({**m.summary(), "state": self.state_of(m, failures), "rows_per_s": round(rate, 3),
                        "alerts_run": seen, "alerts": alerts.get((m.name, m.version), 0),
                        "alerts_all_versions": sum(n for (name, _v), n in alerts.items() if name == m.name),
                        "open_tasks": open_tasks, "materialized": self._materialized(m)})
        return out

    def _alert_counts(self) -> dict[tuple[str, str], int]:
        with self.db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT monitor, version, count(*) FROM moirae_events WHERE monitor IS NOT NULL "
                        "GROUP BY monitor, version")
            return {(r[0], r[1]): int(r[2]) for r in cur.fetchall()}

    def _materialized(self, m: Monitor) -> dict[str, Any]:
        """The span of units materialized for the monitor's event-queries (replica1 and
        ``moirae rematerialize``): ``from``, ``until`` and how many units."""
        d = self.deploy_manager
        lo = hi = None
        units = 0
        for q in m.event_queries:
            if q not in d.event_queries:
                continue
            try:
                done = d.materializer.done_units(q)
                grid = d.materializer.unit_grid(q)
            except Exception as exc:  # noqa: BLE001 - a status line, not worth failing the listing
                log.debug("monitor %r: materialized span unknown: %s", m.name, exc)
                continue
            units += len(done)
            for u in done:
                start, end = grid.bounds(u)
                lo = start if lo is None or start < lo else lo
                hi = end if hi is None or end > hi else hi
        return {"from": lo.isoformat() if lo else None, "until": hi.isoformat() if hi else None, "units": units}


def stored_monitors(db) -> list[dict[str, Any]]:
    """The deployed set as ``moirae_monitors`` records it, without the texts (for a
    front without a running engine); empty when no monitor was ever deployed."""
    with db.connection() as conn, conn.cursor() as cur:
        if not table_exists(cur, "moirae_monitors"):
            return []
        cur.execute("SELECT name, version, state, deployed_at, error FROM moirae_monitors ORDER BY name")
        return [{"name": n, "version": v, "state": s, "deployed_at": at.isoformat(), "error": e}
                for n, v, s, at, e in cur.fetchall()]


def footprint(spark: Any, db: Any, manager: Any, samples: int = 5, every_s: float = 0.2) -> dict[str, Any]:
    """What an engine holds now, for leak checks after a monitor is retired: the active
    Spark streaming queries, this process's threads (by name and the module running
    them), the engine's PostgreSQL sessions and its orphan recall tasks (open, of an
    operator no longer registered).

    Sessions are found in ``pg_stat_activity`` by the engine's application name
    (:func:`named_dsn`); its idle pooled connections are closed first and the Recall
    Manager's worker connections (at most ``recall.max_concurrent``) are not counted.
    Those Spark's Python workers keep (named by
    :func:`archive.exec_sink.worker_application_name`) are counted apart, as
    ``pg_worker_sessions``: Spark starts, retires and replaces its workers on its own,
    so ``python_workers`` is the most workers seen at any of the samples.
    The monitors still running open and close connections all the time, so only
    sessions present in each of ``samples`` looks, ``every_s`` apart, count: a held
    (leaked) one is in all of them. Connections made lazily once per engine (the event
    log's writer, Spark's Python workers') appear with the first monitor: compare
    footprints taken after one deploy and undeploy."""
    queries = sorted(q.name or q.id for q in spark.streams.active) if spark is not None else []
    threads = sorted(f"{t.name} [{_owner(t)}]" for t in threading.enumerate())
    app = dsn_application_name(db.dsn) or application_name(db.schema)
    worker_app = worker_application_name(app)
    held: dict[int, str] | None = None
    running = 0  # Python workers, the most seen at any sample
    workers: set[int] = set()
    for i in range(max(1, samples)):
        if i:
            time.sleep(every_s)
        db.close()  # idle pooled connections are a cache, not held
        with db.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT pid, state, left(query, 80), application_name = %s FROM pg_stat_activity "
                        "WHERE application_name IN (%s, %s) AND pid <> pg_backend_pid() ORDER BY pid",
                        (worker_app, app, worker_app))
            pool = set(manager.connections())
            rows = cur.fetchall()
            now = {pid: f"{pid} {state}: {query}" for pid, state, query, worker in rows if pid not in pool and not worker}
            kept = {pid for pid, *_, worker in rows if worker}
        workers = kept if held is None else workers & kept
        held = now if held is None else {pid: d for pid, d in now.items() if pid in held}
        running = max(running, python_workers())  # a worker Spark retires meanwhile held its session at a sample
    registered = {d.operator for d in manager.descriptions()}
    open_tasks = [t for t in manager.tasks() if t.ended_at is None]
    orphans = sorted(f"{t.task_id} {t.operator}" for t in open_tasks if t.operator not in registered)
    return {"spark_queries": queries, "threads": threads, "pg_sessions": len(held or {}),
            "pg_detail": sorted((held or {}).values()), "pg_worker_sessions": len(workers), "open_tasks": orphans, "open_tasks_all": len(open_tasks),
            "python_workers": running}


def python_workers() -> int:
    """Spark's Python worker processes under this driver (each keeps a connection to the
    archive for the partitions it writes, :mod:`archive.exec_sink`): Spark starts more
    when more tasks run at once, and keeps them."""
    try:
        import psutil

        procs = psutil.Process().children(recursive=True)
        # the daemon (Spark's own or the engine's, moirae.runtime.worker_daemon) and the
        # workers it forks share its command line: all but the daemon are workers
        marks = ("pyspark.daemon", "pyspark.worker", "worker_daemon")
        return max(0, sum(1 for p in procs if any(m in " ".join(p.cmdline()) for m in marks)) - 1)
    except Exception:  # noqa: BLE001 - psutil missing or a process gone meanwhile: unknown
        return 0


#: threads that come and go with Spark's own work, not owned by any monitor: py4j's
#: callback server answers each JVM call on a thread of its own (by the module that runs it);
#: a thread Python did not start (a native library's) is listed once it calls into Python,
#: and stays listed after it ends, so it is no monitor's either ("foreign")
TRANSIENT_THREADS = ("py4j", "pyspark", "socketserver", "foreign")


def _owner(t: threading.Thread) -> str:
    """The module whose code a thread runs (its class's, else its target's); ``foreign``
    for a thread Python did not start."""
    if isinstance(t, threading._DummyThread):
        return "foreign"
    mod = type(t).__module__
    if mod == "threading":
        target = getattr(t, "_target", None)
        mod = getattr(target, "__module__", None) or getattr(type(getattr(target, "__self__", None)), "__module__", "")
    return mod or "?"


def _counted(thread: str) -> bool:
    return not thread.rsplit(" [", 1)[-1].startswith(TRANSIENT_THREADS)


def _pooled(thread: str) -> str:
    """A thread pool's worker as its pool (``ThreadPoolExecutor-3_1`` as ``ThreadPoolExecutor-3``):
    a pool starts its workers as work comes, up to its bound; a pool left running is what leaks.

    >>> _pooled("ThreadPoolExecutor-3_1 [concurrent.futures.thread]"), _pooled("moirae-events [x]")
    ('ThreadPoolExecutor-3 [concurrent.futures.thread]', 'moirae-events [x]')
    """
    name, _, owner = thread.partition(" [")
    if name.startswith("ThreadPoolExecutor-") and "_" in name:
        name = name.rsplit("_", 1)[0]
    return f"{name} [{owner}" if owner else name


def leaks(before: dict[str, Any], after: dict[str, Any], pool_slack: int = 0) -> dict[str, Any]:
    """What ``after`` holds beyond ``before`` (two :func:`footprint` results): Spark
    queries, threads (by name, Spark's transient ones excepted), the driver's PostgreSQL
    sessions beyond ``pool_slack``, Python workers' sessions beyond one per worker
    running (each keeps one per database, :func:`archive.exec_sink.worker_connection`),
    orphan recall tasks. Empty when nothing leaked."""
    from collections import Counter

    out: dict[str, Any] = {}
    extra_q = sorted(set(after["spark_queries"]) - set(before["spark_queries"]))
    if extra_q:
        out["spark_queries"] = extra_q
    extra_t = Counter(_pooled(t) for t in after["threads"] if _counted(t))
    extra_t.subtract(Counter(_pooled(t) for t in before["threads"] if _counted(t)))
    extra_t = Counter({t: n for t, n in extra_t.items() if n > 0 and not (  # more workers of a pool kept
        t.startswith("ThreadPoolExecutor-") and any(_pooled(b) == t for b in before["threads"]))})
    threads = sorted(t for t, n in extra_t.items() if n > 0)
    if threads:
        out["threads"] = threads
    if after["pg_sessions"] > before["pg_sessions"] + pool_slack:
        old = {d.split(" ", 1)[0] for d in before.get("pg_detail", ())}
        out["pg_sessions"] = [d for d in after.get("pg_detail", ()) if d.split(" ", 1)[0] not in old]
    if after.get("pg_worker_sessions", 0) > max(after.get("python_workers", 0), before.get("pg_worker_sessions", 0)):
        out["pg_worker_sessions"] = after["pg_worker_sessions"]
    extra_tasks = sorted(set(after["open_tasks"]) - set(before["open_tasks"]))
    if extra_tasks:
        out["open_tasks"] = extra_tasks
    return out
