"""The ``cluster`` scenario (the Moirae paper's running example) on an engine.

Its history (``history_days`` of the scenario file) is written straight into the
archive in bulk, once: each generated chunk is one batch with a negative batch id, so
an interrupted load resumes without duplicates. The live part continues from the end
of the history through the ``moirae_cluster`` Spark source. The history of the
overload event-query is materialized in batch (M 4.2) so Similarity Recall has past
incidents to compare with from the first alert.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from archive import Archiver
from moirae.materialize.replica import rematerialize
from moirae.scenarios.queries import deploy_queries
from moirae.sources.cluster import STREAMS, ClusterScenario
from moirae.sources.cluster_config import load_cluster_config
from moirae.sources.spark_cluster import FORMAT, register_cluster_source

if TYPE_CHECKING:
    from moirae.engine.engine import Engine

DEFAULT_FILE = Path(__file__).resolve().parents[2] / "config" / "scenarios" / "cluster.yaml"
INDEXES = {"metrics": [("sid",)], "users": [("sid",)], "procs": [("sid",)], "incidents": [("sid",)]}


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[rate]}"), TimeRemainingColumn())


def load_history(archiver: Archiver, scenario: ClusterScenario, progress: bool = True) -> int:
    """Bulk-load the scenario's history (idempotent: batches are keyed by chunk)."""
    cfg = scenario.config
    chunks = list(range(int((cfg.history_end_ns - cfg.start_ns) // int(cfg.chunk_hours * 3600e9)) + 1))
    done = {s: set(archiver.batch_ids(s)) for s in STREAMS}
    rows = 0
    t0 = datetime.now(UTC)
    with _progress() as bar:
        task = bar.add_task("loading history", total=len(chunks), rate="", visible=progress)
        for i, (_a, _b, frames) in enumerate(scenario.history()):
            for stream, frame in frames.items():
                if -(i + 1) in done[stream]:
                    continue
                rows += archiver.append(stream, -(i + 1), frame, bulk=True).rows
            secs = max(1e-9, (datetime.now(UTC) - t0).total_seconds())
            bar.update(task, advance=1, rate=f"{rows / secs:,.0f} rows/s")
    history_end = datetime.fromtimestamp(cfg.history_end_ns / 1e9, UTC)
    archiver.demote(history_end, list(STREAMS))
    archiver.age()
    return rows


def register_sources(engine: Engine, path: str | Path, live_options: dict[str, str] | None = None) -> None:
    """Register the scenario's live streams with ``engine``: the ``moirae_cluster`` source
    over the scenario file ``path``, with extra source options ``live_options``."""
    spark = engine.spark
    register_cluster_source(spark)
    for stream in STREAMS:
        df = (spark.readStream.format(FORMAT).option("config", str(path)).option("stream", stream)
              .options(**(live_options or {})).load().drop("ingest_ts"))
        # one generator paces every stream: a stream whose offsets stand still has ended
        # (``until``), so it is sparse (moirae.runtime.idle), never lagging
        engine.source(stream, df, ts="ts", lateness="1 minute", indexes=INDEXES[stream], sparse=True)


def deploy(engine: Engine, live: bool = True, progress: bool = True, scenario_file: str | Path | None = None,
           materialize: bool = True, live_options: dict[str, str] | None = None) -> dict:
    """Deploy the scenario. ``live_options``: extra ``moirae_cluster`` source options for
    every live stream (e.g. ``{"until": ...}`` for a bounded, reproducible run)."""
    path = Path(scenario_file or DEFAULT_FILE).resolve()
    cfg = load_cluster_config(path)
    scenario = ClusterScenario(cfg)
    register_sources(engine, path, live_options)
    # the queries first: an event-query asks for its source's rows to be written sorted by
    # its window keys (archive.contributors.cluster_by), so the history loaded next is
    # clustered as live rows are, and a history-query pinned to one key (the norm's
    # ``h.sid = :sid``) reads that key's block ranges of it, not the whole chunk
    deploy_queries(engine, threshold=cfg.metrics.bw_threshold_mbps)
    loaded = load_history(engine.archiver, scenario, progress) if live or materialize else 0
    done = []
    if not materialize:
        return {"scenario": "cluster", "file": str(path), "history_rows_loaded": loaded}
    with _progress() as bar:
        task = bar.add_task("materializing past overloads", total=None, rate="", visible=progress)

        def tick(res, n, total):
            bar.update(task, completed=n, total=total, rate=f"{res.events} events")

        done = rematerialize(engine.materializer, "overload", resume=True, batch=48, on_chunk=tick)
    return {"scenario": "cluster", "file": str(path), "history_rows_loaded": loaded,
            "history_chunks_materialized": len(done), "threshold": cfg.metrics.bw_threshold_mbps}
