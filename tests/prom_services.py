"""Prometheus, its node exporter and Alertmanager (Debian's ``prometheus``,
``prometheus-node-exporter`` and ``prometheus-alertmanager``) started by tests on free
loopback ports, each with its own configuration and storage in the test's folder, and
stopped after it. ``.ci/run`` installs the packages when absent.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

BINARIES = {"prometheus": "prometheus", "node_exporter": "prometheus-node-exporter",
            "alertmanager": "prometheus-alertmanager"}


def binary(what: str) -> str:
    path = shutil.which(BINARIES[what]) or (f"/usr/bin/{BINARIES[what]}" if Path(f"/usr/bin/{BINARIES[what]}").exists()
                                            else None)
    if path is None:
        pytest.skip(f"{BINARIES[what]} is not installed (apt-get install {BINARIES[what]}; .ci/run does)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback test services
        return json.loads(r.read())


def _ready(url: str, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2).read()  # noqa: S310
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer {url} within {timeout} s")


@contextmanager
def running(cmd: list[str], ready_url: str, what: str, log: Path):
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            _ready(ready_url, proc, what)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)


@contextmanager
def node_exporter(tmp: Path):
    """A node exporter with a few collectors (cpu, meminfo, loadavg); yields its address."""
    port = free_port()
    cmd = [binary("node_exporter"), f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
           "--collector.cpu", "--collector.meminfo", "--collector.loadavg"]
    with running(cmd, f"http://127.0.0.1:{port}/metrics", "node exporter", tmp / "node_exporter.log"):
        yield f"127.0.0.1:{port}"


@contextmanager
def prometheus(tmp: Path, config: str):
    """A Prometheus with ``config`` (YAML text); yields its base URL."""
    port = free_port()
    (tmp / "prometheus.yml").write_text(config)
    cmd = [binary("prometheus"), f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
           f"--web.listen-address=127.0.0.1:{port}"]
    with running(cmd, f"http://127.0.0.1:{port}/-/ready", "prometheus", tmp / "prometheus.log"):
        yield f"http://127.0.0.1:{port}"


@contextmanager
def alertmanager(tmp: Path, config: str):
    """An Alertmanager with ``config`` (YAML text), clustering off; yields its base URL."""
    port = free_port()
    (tmp / "alertmanager.yml").write_text(config)
    cmd = [binary("alertmanager"), f"--config.file={tmp / 'alertmanager.yml'}", f"--storage.path={tmp / 'am'}",
           f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="]
    with running(cmd, f"http://127.0.0.1:{port}/-/ready", "alertmanager", tmp / "alertmanager.log"):
        yield f"http://127.0.0.1:{port}"
