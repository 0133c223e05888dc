"""The console page's JavaScript, run in Node (when installed) against a served
engine: an alert published on the bus appears in the list live, its outputs are
counted as they stream in, selecting it renders its recall results, and the accelerate
button steers the real Recall Manager."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from api_helpers import add_event, wait_for

from moirae.api import serve
from moirae.api.console_page import PAGE

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.postgres,
              pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
              pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)]


def test_console_lists_alerts_live_and_steers(engine, tmp_path):
    script = tmp_path / "console.js"
    script.write_text(PAGE.split("<script>")[1].split("</script>")[0])
    with serve(engine, host="127.0.0.1", port=0) as server:
        proc = subprocess.Popen(["node", str(HERE / "console_harness.js"), server.url, str(script)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            def step():
                line = proc.stdout.readline()
                assert line, proc.stderr.read()
                msg = json.loads(line)
                assert msg["step"] != "error", msg
                return msg

            assert step()["step"] == "open"
            rec = add_event(engine, "ev:live", 170, submit=False)
            engine.deploy.manager.bus.publish({"type": "event", **rec.to_json()})  # as the Deploy Manager does
            proc.stdin.write("ev:live\n")
            proc.stdin.flush()
            assert "ev:live" in step()["html"]
            engine.deploy.manager.submit(rec.as_event(), ["hist"])
            wait_for(lambda: engine.deploy.results.flush(1) and engine.deploy.results.read("ev:live"),
                     what="stored outputs")
            detail = step()["html"]
            assert "Recall hist" in detail and "mean_bw" in detail and "suspended" in detail
            assert step()["msg"] == "accelerated 1 recall task(s) of event ev:live by 30 tickets"
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    wait_for(lambda: [t.tickets for t in engine.deploy.manager.tasks("ev:live")] == [130], what="130 tickets")
