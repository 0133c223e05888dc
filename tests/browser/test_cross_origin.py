"""A hostile page in the operator's browser: a page on another origin,
even on the same host (so the console's session cookie goes along), can neither cancel
nor acknowledge: its requests are refused. The console itself, in the same browser,
still can (its session and CSRF token)."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from tests.browser.browser_helpers import wait
from tests.browser.test_console_steps import event

pytestmark = [pytest.mark.browser, pytest.mark.postgres,
              pytest.mark.parametrize("pg_dsn", ["embedded"], indirect=True)]

HOSTILE = """<!doctype html><html><body><form id="f" method="POST" enctype="text/plain"
action="{target}/api/incidents/{iid}/acknowledge" target="sink"><input name='{{"by":"evil"}}' value=""></form>
<iframe name="sink"></iframe><script>
window.results = [];
const T = "{target}";
async function go() {{
  for (const [path, opts] of [
      ['/api/events/{eid}/cancel', {{method: 'POST', mode: 'no-cors', credentials: 'include'}}],
      ['/api/incidents/{iid}/acknowledge', {{method: 'POST', mode: 'no-cors', credentials: 'include',
                                             headers: {{'Content-Type': 'text/plain'}}, body: '{{"by":"evil"}}'}}],
      ['/api/events/{eid}/cancel', {{method: 'POST', credentials: 'include',
                                    headers: {{'Content-Type': 'application/json'}}, body: '{{}}'}}]]) {{
    try {{ const r = await fetch(T + path, opts); window.results.push(r.type + ':' + r.status); }}
    catch (e) {{ window.results.push('blocked:' + e.message); }}
  }}
  document.getElementById('f').submit();
  window.results.push('form');
}}
go();
</script></body></html>"""


def _serve(page: str) -> tuple[http.server.HTTPServer, str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def _status(engine, iid: str) -> str | None:
    try:
        return engine.deploy.incidents.get(iid)["status"]
    except LookupError:
        return None


def test_another_origin_cannot_cancel_or_acknowledge_but_the_console_can(small, browser):
    engine, url = small
    event(engine, "x1", 170, "s0", submit=True)
    wait(lambda: engine.deploy.manager.tasks("x1"), 30, "the recall task")
    wait(lambda: _status(engine, "x1") == "open", 30, "the incident")
    browser.get(url + "/")  # the operator has the console open: its session cookie is set for 127.0.0.1
    wait(lambda: browser.get_cookie("moirae_session") is not None, 30, "the console session")

    srv, hostile = _serve(HOSTILE.format(target=url, eid="x1", iid="x1"))
    try:
        browser.get(hostile + "/")
        wait(lambda: "form" in (browser.execute_script("return window.results") or []), 30, "the hostile page")
        time.sleep(1.0)  # the form's POST lands in its frame
        results = browser.execute_script("return window.results")
    finally:
        srv.shutdown()
    assert engine.deploy.manager.tasks("x1"), f"another origin cancelled the recall ({results})"
    assert _status(engine, "x1") == "open", f"another origin acknowledged ({results})"

    browser.get(url + "/")  # the console itself, same browser, same cookie
    wait(lambda: browser.execute_script("return typeof api === 'function' && !!csrf"), 30, "the console's script")
    done = browser.execute_async_script(
        "const cb = arguments[arguments.length - 1];"
        "api('/api/incidents/x1/acknowledge', {method: 'POST', body: JSON.stringify({by: 'ops'})})"
        ".then(r => cb(r.status), e => cb('error: ' + e.message));")
    assert done == "acknowledged", done
    cancelled = browser.execute_async_script(
        "const cb = arguments[arguments.length - 1];"
        "api('/api/events/x1/cancel', {method: 'POST'}).then(r => cb(r.cancelled), e => cb('error: ' + e.message));")
    assert cancelled == 1 and not engine.deploy.manager.tasks("x1")
