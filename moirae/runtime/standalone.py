"""A Spark standalone cluster on this machine, from what the ``pyspark`` package ships.

One master and N workers, each its own JVM started with ``pyspark/bin/spark-class``
(the package has no ``start-master.sh``), on free ports, with small cores and memory.
For tests and benchmarks that run the engine with ``spark.master = spark://...``;
a real deployment starts its cluster with Spark's own scripts, YARN or Kubernetes.

Usage: ``with StandaloneCluster(workers=2) as cluster:`` then
``Engine.from_config(None, spark={"master": cluster.master_url})``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from moirae.runtime.errors import ClusterStartError


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandaloneCluster:
    """Start a master and ``workers`` workers; :meth:`stop` (or leaving the ``with``
    block, even on an exception) kills every process it started, and only those."""

    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g", host: str = "127.0.0.1",
                 timeout: float = 120.0) -> None:
        self.workers, self.cores, self.memory, self.host, self.timeout = workers, cores, memory, host, timeout
        self.port = _free_port()
        self.master_url = f"spark://{host}:{self.port}"
        self.dir = Path(tempfile.mkdtemp(prefix="moirae-standalone-"))
        self._procs: list[subprocess.Popen] = []

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": self.host,
               "SPARK_LOG_DIR": str(self.dir), "SPARK_WORKER_DIR": str(self.dir / "work")}
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 - kept open for the process's life
        proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self._procs.append(proc)
        return proc

    def start(self) -> StandaloneCluster:
        try:
            self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", self.host,
                                   "--port", str(self.port), "--webui-port", str(_free_port())])
            self._wait_for(lambda: self._listening(self.port), "the master")
            for i in range(self.workers):
                self._spawn(f"worker{i}", ["org.apache.spark.deploy.worker.Worker", self.master_url,
                                           "--host", self.host, "--cores", str(self.cores), "--memory", self.memory,
                                           "--webui-port", str(_free_port()), "--work-dir", str(self.dir / f"w{i}")])
            self._wait_for(lambda: self.registered_workers() >= self.workers, f"{self.workers} workers")
        except BaseException:
            self.stop()
            raise
        return self

    def _listening(self, port: int) -> bool:
        with socket.socket() as s:
            return s.connect_ex((self.host, port)) == 0

    def registered_workers(self) -> int:
        text = (self.dir / "master.log").read_text(errors="replace") if (self.dir / "master.log").exists() else ""
        return text.count("Registering worker")

    def _wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            dead = [p for p in self._procs if p.poll() is not None]
            if dead:
                raise ClusterStartError(f"{what}: a cluster process exited ({dead[0].args[1]}); logs in {self.dir}")
            if ready():
                return
            time.sleep(0.3)
        raise ClusterStartError(f"{what} did not come up within {self.timeout:.0f} s; logs in {self.dir}")

    def stop(self) -> None:
        """Kill the workers (and the executors they launched) and the master."""
        for proc in reversed(self._procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)  # the process group this object started
                except ProcessLookupError:
                    pass
        for proc in reversed(self._procs):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self._procs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
