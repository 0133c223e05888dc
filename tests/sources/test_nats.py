"""The JetStream source (``moirae_nats``) against the machine's real NATS server.

- Its reads are replayable: a sequence range read twice gives the same messages.
- Exactly once across crashes: the engine archiving a JetStream stream is SIGKILLed
  three times while a publisher keeps publishing, and restarted on the same data
  directory and database each time; in the end the archive holds every published
  message once (no duplicate, no gap), with its stream sequence.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from moirae.sources.nats import NatsDataSource, NatsSourceError, last_sequence, parse_options, read_range
from tests.sources.brokers import NATS_URL, delete_stream, fresh_stream, need, publish

ROOT = Path(__file__).resolve().parents[2]
KILLS = 3


def test_sequence_ranges_replay_the_same_messages():
    need(4222, "NATS server")
    import asyncio

    name = f"T{uuid.uuid4().hex[:10]}"
    fresh_stream(name, [f"{name}.>"])
    try:
        seqs = publish(f"{name}.a", [{"id": i} for i in range(30)])
        assert seqs == list(range(1, 31))
        assert asyncio.run(last_sequence([NATS_URL], name)) == 30
        first = asyncio.run(read_range([NATS_URL], name, "", 10, 20, fetch=4))
        again = asyncio.run(read_range([NATS_URL], name, "", 10, 20, fetch=7))
        assert [m[0] for m in first] == list(range(11, 21)) and first == again
        assert asyncio.run(read_range([NATS_URL], name, "", 20, 20)) == []
    finally:
        delete_stream(name)


def test_bad_options_name_the_option():
    with pytest.raises(NatsSourceError, match="'stream'"):
        parse_options({"servers": NATS_URL})
    with pytest.raises(NatsSourceError, match="maxBatch|maxbatch"):
        parse_options({"stream": "S", "maxBatch": "many"})
    with pytest.raises(NatsSourceError, match="unknown"):
        parse_options({"stream": "S", "sever": "x"})
    with pytest.raises(NatsSourceError, match="moirae_nats needs a schema: the option 'schema'"):
        NatsDataSource({"stream": "S"}).schema()
    assert NatsDataSource({"stream": "S", "Schema": "ts timestamp, v double"}).schema() == "ts timestamp, v double"


def _child(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MOIRAE_PG_DSN", None)
    return subprocess.Popen([sys.executable, "-m", "tests.sources.broker_child", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


class Publisher(threading.Thread):
    """Publishes ids 0, 1, 2, ... in small acknowledged batches until stopped."""

    def __init__(self, subject: str) -> None:
        super().__init__(daemon=True)
        self.subject, self.stop, self.sent, self.seqs = subject, threading.Event(), 0, []

    def run(self) -> None:
        t0 = 1_700_000_000.0
        while not self.stop.is_set():
            batch = [{"ts": t0 + i / 10, "id": i, "v": i * 0.5} for i in range(self.sent, self.sent + 40)]
            self.seqs += publish(self.subject, batch)
            self.sent += len(batch)
            time.sleep(0.05)


@pytest.mark.slow
def test_three_kills_while_publishing_lose_and_duplicate_nothing(pg, tmp_path):
    need(4222, "NATS server")
    if not pg.dsn.startswith("host=127.0.0.1"):
        pytest.skip("one backend is enough for the process-kill test (slow)")
    name = f"K{uuid.uuid4().hex[:10]}"
    fresh_stream(name, [f"{name}.>"])
    data = tmp_path / "data"
    args = [str(data), pg.dsn, pg.schema, name]
    rng = random.Random(20261128)
    pub = Publisher(f"{name}.m")
    pub.start()
    try:
        seen = 0
        for _ in range(KILLS):
            child = _child([*args, "300"])
            try:
                for line in child.stdout:  # killed once it has archived more since the last kill
                    if line.startswith("ARCHIVED") and int(line.split()[1]) > seen + 200:
                        seen = int(line.split()[1])
                        break
                assert child.poll() is None, "the engine ended before it was killed"
                time.sleep(rng.uniform(0.0, 0.4))  # somewhere inside a micro-batch or between two
            finally:
                child.send_signal(signal.SIGKILL)
                child.wait(timeout=30)
        pub.stop.set()
        pub.join(timeout=30)
        total = pub.sent
        # the restart that drains the backlog takes whole batches: small ones test the kills,
        # not the catch-up, and would make it a minute of 400-message batches
        final = _child([*args, "120", str(total), "20000"])
        out, _ = final.communicate(timeout=180)
        assert "CLOSED" in out
        with pg.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*), count(DISTINCT id), min(id), max(id), count(DISTINCT seq) FROM jsin")
            n, distinct, lo, hi, seqs = cur.fetchone()
            cur.execute("SELECT seq FROM jsin ORDER BY seq")
            archived_seqs = [r[0] for r in cur.fetchall()]
    finally:
        pub.stop.set()
        delete_stream(name)
    assert seen > 0 and total > seen
    assert (n, distinct, lo, hi, seqs) == (total, total, 0, total - 1, total), (n, distinct, lo, hi, total)
    assert archived_seqs == pub.seqs
