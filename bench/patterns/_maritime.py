"""Shared parts of the maritime pattern benchmarks: the rows (written once per size, as
the header-less CSV both engines read), our side (the pattern matcher over that CSV,
keys split over worker processes), Flink's side (PyFlink in its own virtual
environment, bench/.venv-flink, created when absent; one JVM serving runs in the order the
caller interleaves them), and match comparison.

A match is compared as ``(pattern, vessel_id, start_ts, end_ts)`` with times as
``yyyy-MM-dd HH:mm:ss.SSS`` UTC strings, which is how Flink prints a TIMESTAMP(3).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from moirae.sources.maritime import COLUMNS, MaritimeConfig, MaritimeScenario

ROOT = Path(__file__).resolve().parents[2]
FLINK_VENV = ROOT / "bench" / ".venv-flink"
FLINK_PIN = "apache-flink==1.20.5"
FLINK_JOB = Path(__file__).resolve().parent / "flink" / "job.py"
DATA = ROOT / ".moirae-bench" / "maritime"

_TYPES = {"vessel_id": "string", "ts": "timestamp[ms]", "status": "string", "ship_type": "string",
          "nearest_port": "string", "near_coast": "bool", "near_port": "bool", "in_anchorage": "bool",
          "in_fishing": "bool", "in_protected": "bool"}


def dataset(vessels: int, hours: float, seed: int = 7) -> tuple[Path, MaritimeScenario]:
    """The header-less CSV of a scenario size (written afresh: the generator may have
    changed since a file of the same size was written) and its generator."""
    scen = MaritimeScenario(MaritimeConfig(seed=seed, vessels=vessels, hours=hours))
    path = DATA / f"maritime_s{seed}_v{vessels}_h{hours:g}.csv"
    tmp = path.with_suffix(".tmp")
    scen.write(tmp, header=False)
    tmp.replace(path)
    return path, scen


def read_rows(path: Path) -> pd.DataFrame:
    """The CSV as a frame with typed columns and a ``row_id`` (the file position)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    types = {c: (pa.float64() if c not in _TYPES else
                 {"string": pa.string(), "timestamp[ms]": pa.timestamp("ms"), "bool": pa.bool_()}[_TYPES[c]])
             for c in COLUMNS}
    table = pcsv.read_csv(str(path), read_options=pcsv.ReadOptions(column_names=list(COLUMNS)),
                          convert_options=pcsv.ConvertOptions(column_types=types))
    df = table.to_pandas()
    df["row_id"] = np.arange(len(df), dtype=np.int64)
    return df


def _fmt(ts) -> str:
    return pd.Timestamp(ts).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def match_rows(patterns: list[tuple[str, str]], rows: pd.DataFrame) -> list[tuple[str, str, str, str]]:
    """Every match of ``patterns`` over ``rows`` (all keys, to the end of the stream)."""
    from moirae.patterns import Matcher, compile_pattern

    out: list[tuple[str, str, str, str]] = []
    for name, sql in patterns:
        m = Matcher(compile_pattern(sql, name=name, columns=list(rows.columns)))
        found, states = m.advance_frame({}, rows)
        for st in states.values():
            more, _ = m.finish(st)
            found.extend(more)
        for x in found:
            out.append((name, str(x.key[0]), _fmt(x.measures["start_ts"]), _fmt(x.measures["end_ts"])))
    return out


_SHARED: dict = {}


def _work(i: int) -> list[tuple[str, str, str, str]]:
    return match_rows(_SHARED["patterns"], _SHARED["parts"][i])


def ours(path: Path, patterns: list[tuple[str, str]], workers: int = 2) -> tuple[float, list[tuple]]:
    """(seconds, matches) of our matcher over the CSV: read it, split the keys over
    ``workers`` forked processes (by hash, as a keyed exchange does), match, gather."""
    t0 = time.perf_counter()
    rows = read_rows(path)
    if workers <= 1:
        return time.perf_counter() - t0, match_rows(patterns, rows)
    h = pd.util.hash_array(rows["vessel_id"].to_numpy(dtype=object)) % workers
    _SHARED.update(patterns=patterns, parts=[rows[h == i] for i in range(workers)])
    with mp.get_context("fork").Pool(workers) as pool:
        found = [m for part in pool.map(_work, range(workers)) for m in part]
    _SHARED.clear()
    return time.perf_counter() - t0, found


def ensure_flink() -> tuple[Path | None, str]:
    """The Flink virtual environment's python (created with PyFlink when absent), or
    (None, what failed)."""
    py = FLINK_VENV / "bin" / "python"
    if py.exists():
        probe = subprocess.run([str(py), "-c", "import pyflink"], capture_output=True, text=True)
        if probe.returncode == 0:
            return py, ""
    try:
        subprocess.run([sys.executable, "-m", "venv", str(FLINK_VENV)], check=True, capture_output=True, text=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", FLINK_PIN], check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        return None, f"creating {FLINK_VENV.name} with {FLINK_PIN} failed: {(exc.stderr or '').strip()[-300:]}"
    return py, ""


class FlinkFailed(RuntimeError):
    """A Flink run failed (the message is Flink's error line)."""


class FlinkJob:
    """One Flink JVM (``bench/patterns/flink/job.py`` in the Flink virtual environment)
    serving runs one at a time, so its runs can interleave with ours: ``run(csv,
    patterns)`` gives ``(seconds, matches)``, timed inside the JVM from submitting the job
    to its last match. Raises :class:`FlinkFailed` with Flink's error line when a run fails."""

    def __init__(self, py: Path, parallelism: int = 2, heap: str = "2g"):
        env = {**os.environ, "JAVA_TOOL_OPTIONS": f"-Xmx{heap}"}
        self._err = tempfile.TemporaryFile(mode="w+")
        self._p = subprocess.Popen([str(py), str(FLINK_JOB), str(parallelism)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=self._err, text=True, env=env)
        self.version = self._answer().get("flink")

    def _answer(self) -> dict:
        for line in self._p.stdout:
            if line.startswith("@@RUN "):
                return json.loads(line[len("@@RUN "):])
        self._err.seek(0)
        lines = [ln for ln in self._err.read().splitlines() if "Exception" in ln or "Error" in ln]
        raise FlinkFailed(lines[-1] if lines else f"the Flink job exited ({self._p.wait()})")

    def run(self, csv: Path, patterns: list[tuple[str, str]]) -> tuple[float, list[tuple]]:
        self._p.stdin.write(json.dumps({"csv": str(csv), "patterns": [{"name": n, "sql": s} for n, s in patterns]})
                            + "\n")
        self._p.stdin.flush()
        ans = self._answer()
        if "error" in ans:
            raise FlinkFailed(ans["error"])
        return ans["seconds"], [tuple(m) for m in ans["matches"]]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._p.stdin.close()
        try:
            self._p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._p.kill()
            self._p.wait()
        self._err.close()


def compare(a: list[tuple], b: list[tuple]) -> dict:
    """How two match lists differ (as sets; duplicates counted apart)."""
    sa, sb = set(a), set(b)
    return {"ours": len(a), "flink": len(b), "same": len(sa & sb), "only_ours": sorted(sa - sb)[:5],
            "only_flink": sorted(sb - sa)[:5], "duplicates": (len(a) - len(sa), len(b) - len(sb)),
            "identical": sa == sb and len(a) == len(sa) and len(b) == len(sb)}
