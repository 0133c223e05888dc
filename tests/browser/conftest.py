"""Fixtures of the browser tests: a real engine on the (small) cluster scenario with its
API and console served, and Debian's headless chromium driven through chromium-driver
by Selenium. Nothing is downloaded at run time: without ``chromium``, ``chromedriver``
or Selenium the ``browser`` tests are skipped with one line saying what is missing
(``make test`` installs the Debian packages when it runs as root)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.browser.browser_helpers import SHOTS

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def missing() -> str | None:
    """What is missing to run a real browser, or None."""
    gone = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        gone.append("selenium (pip install -e '.[dev]')")
    return ", ".join(gone) or None


def pytest_collection_modifyitems(config, items):
    why = missing()
    if why is None:
        return
    skip = pytest.mark.skip(reason=f"browser tests skipped: not installed: {why} "
                                   "(apt-get install chromium chromium-driver)")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


def where_thrown(lines: list[str], frames: int = 12) -> str:
    """The deepest Java exception of a log and its first stack frames (the tail quoted
    above leaves frames out), or nothing."""
    thrown = re.compile(r"(?:^Caused by: |\): )[\w.$]+(?:Exception|Error)\b")  # a cause, or a lost task's error
    at = [i for i, ln in enumerate(lines) if thrown.search(ln)]
    if not at:
        return ""
    return "\n-- where the deepest cause was thrown:\n" + "\n".join(lines[at[-1]:at[-1] + 1 + frames])


class Live:
    """The engine child: its API ``url``, the database it writes (``db``) and the API
    token a caller other than the console needs (the engine's local token)."""

    def __init__(self, url: str, db, token: str | None = None) -> None:
        self.url, self.db, self.token = url, db, token


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A real engine on the small cluster scenario in its own process (engine_child.py),
    its API and console served; the test reads its database read-only to pick cases."""
    from archive.pg import Database, embedded_dsn

    data = Path(os.environ.get("MOIRAE_TEST_DATA_DIR", ROOT / ".moirae-test"))  # as tests/conftest.py
    db = Database(embedded_dsn(data), schema=f"t_{uuid.uuid4().hex[:12]}")
    tmp = tmp_path_factory.mktemp("browser")
    env = {k: v for k, v in os.environ.items() if k not in ("MOIRAE_PG_DSN", "MOIRAE_API_TOKEN")}
    log = open(tmp / "engine.log", "w+")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "tests.browser.engine_child", db.dsn, db.schema, str(tmp / "data")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT, env=env)
    try:
        lines = []
        while not (lines and lines[-1].startswith("READY ")):
            line = proc.stdout.readline()
            if not line:  # the child ended
                proc.wait(60)
                log.seek(0)
                text = log.read().splitlines()
                tail = [ln for ln in text if not ln.startswith(("\tat ", "  "))][-15:]
                if any("missed the connect-back timeout" in ln for ln in tail) and "failed: Python worker" in tail[-1]:
                    # the machine, not the console: Spark's Python workers never started in time
                    pytest.skip("browser tests: Spark's Python workers kept missing their 10 s connect-back "
                                "timeout (an overloaded machine); " + tail[-1][:200])
                pytest.fail("the engine did not start:\n" + "".join(lines) + "\n".join(tail) + where_thrown(text))
            lines.append(line)
        line = lines[-1]
        token_file = tmp / "data" / "api.token"  # moirae.api.access.local_token
        yield Live(line.split()[1], db, token_file.read_text().strip() if token_file.exists() else None)
    finally:
        if proc.poll() is None:
            proc.stdin.close()
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        db.drop_schema()


@pytest.fixture(scope="module")
def browser():  # noqa: D401
    """Headless chromium at 1400x900, its console log kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,900", "--hide-scrollbars=false"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
    driver.set_window_size(1400, 900)
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def small(engine_factory):
    """A real engine without Spark queries (as tests/api/conftest.py): ``metrics`` archived
    for 3 hours of 3 servers, the ``overload`` incidents configured, and a Recall ``hist``
    that suspends after every chunk, served on a free port. Returns ``(engine, url)``."""
    import numpy as np
    import pandas as pd

    from archive.streams import StreamSpec
    from moirae.api import serve
    from recall.operator import Recall

    e = engine_factory(archive={"chunk_span": "10m", "chunk_target_rows": 0},
                       recall={"max_concurrent": 2, "tickets_per_result": 0})
    e.archiver.register_stream(StreamSpec.build("metrics", "ts", {"sid": "text", "bw": "double"}, indexes=[("sid",)]))
    n = 3 * 360
    rng = np.random.default_rng(7)
    t0 = pd.Timestamp("2024-03-01", tz="UTC")
    e.archiver.append("metrics", -1, pd.DataFrame({
        "ts": pd.date_range(t0, periods=n, freq="10s"), "sid": [f"s{i % 3}" for i in range(n)],
        "bw": rng.normal(50, 10, n)}), bulk=True)
    e.deploy.manager.register(Recall(
        "hist", "SELECT h.sid, avg(h.bw) AS mean_bw, stddev(h.bw) AS sd_bw, count(*) AS n FROM metrics h "
        "WHERE h.sid = :sid GROUP BY h.sid", store=e.archiver, feedback_period=1, feedback_timeout=600))
    e.deploy.incidents.configure("overload", keys="sid", metric="avg_bw", threshold=80.0, series=("metrics", "bw"),
                                 norm="hist")
    server = serve(e, host="127.0.0.1", port=0)
    try:
        yield e, server.url
    finally:
        server.stop()
        e.close()
