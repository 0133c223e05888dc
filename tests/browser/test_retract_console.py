"""Retractions and forward lookup in the console, in a real browser (headless chromium)
on a real engine (Spark and PostgreSQL, the small bandwidth-overload scenario with its
provenance): from an alert's provenance view, clicking a source row lists every alert
that row fed (the same alerts the forward lookup API answers); the view says whether the
alert's support is still in the archive; once its rows are retracted the alert shows as
retracted, with the reason, both in its view and in the clicked row's list."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import quote

import pytest

import tests.moirae.scenario_small as sc
from tests.browser.browser_helpers import SHOTS, click, count, text, texts, wait
from tests.retract import overload_live

pytestmark = [pytest.mark.browser, pytest.mark.spark, pytest.mark.postgres]
REASON = "s0's sensor was stuck (browser test)"


def _fed(browser) -> list[str]:
    """The alert ids the clicked source row's list shows."""
    return [row.split("\t")[0] for row in texts(browser, "#ifed tr")[1:]]


def test_provenance_click_lists_every_alert_fed_and_a_retracted_alert_says_why(spark, pg, tmp_path, monkeypatch,
                                                                               browser):
    if not pg.dsn.startswith("host=127.0.0.1"):
        pytest.skip("one backend is enough for the browser retraction test (slow)")
    from moirae.api import serve

    engine, folder = overload_live.start(spark, pg, tmp_path, monkeypatch)
    server = None
    try:
        parts, eids = overload_live.feed(engine, folder)
        sc.wait(lambda: all(engine.alert_support(e)["available"] for e in eids), what="the alerts' provenance")
        iid = engine.incidents.incident_of(eids)[eids[0]]
        server = serve(engine, host="127.0.0.1", port=0)

        browser.get(f"{server.url}/#/incident/{quote(iid, safe='')}")
        wait(lambda: iid in text(browser, "#ievents"), 60, f"incident {iid} shown")
        click(browser, "#iprov summary")
        wait(lambda: count(browser, "#iprovbody tr.src") and "support:" in text(browser, "#isupport"), 60,
             "the provenance rows and the support line")
        support = text(browser, "#isupport")
        assert "active" in support and "still in the archive" in support, support
        rows = browser.execute_script("return [...document.querySelectorAll('#iprovbody tr.src')]"
                                      ".map(r => [r.dataset.stream, r.dataset.sid])")
        stream, sid = rows[0]
        click(browser, "#iprovbody tr.src")
        wait(lambda: "fed" in text(browser, "#ifed p"), 30, "the clicked row's alerts")
        want = engine.forward_lookup({"stream": stream, "ids": [int(sid)]})
        assert sorted(_fed(browser)) == sorted(a["eid"] for a in want["alerts"]) and iid in _fed(browser)
        assert f"fed {len(want['alerts'])} alert(s)" in text(browser, "#ifed p")
        SHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SHOTS / "retract-01-provenance-lookup.png"))

        hot = parts[1]
        out = engine.retract({"stream": "metrics", "key": {"sid": "s0"}, "start": hot["ts"].min().isoformat(),
                              "end": (hot["ts"].max() + timedelta(seconds=1)).isoformat()}, REASON, "ann")
        assert iid in out["retracted"]
        browser.get(f"{server.url}/#/incident/{quote(iid, safe='')}")
        browser.refresh()
        wait(lambda: iid in text(browser, "#ievents"), 60, f"incident {iid} shown again")
        click(browser, "#iprov summary")
        wait(lambda: "retracted" in text(browser, "#isupport"), 60, "the alert shown as retracted")
        support = text(browser, "#isupport")
        assert REASON in support and f"retraction {out['id']}" in support and "still in the archive" in support
        click(browser, "#iprovbody tr.src")
        wait(lambda: "fed" in text(browser, "#ifed p"), 30, "the clicked row's alerts, after the retraction")
        assert any(f"retracted: {REASON}" in t for t in texts(browser, "#ifed tr")), texts(browser, "#ifed tr")
        browser.save_screenshot(str(SHOTS / "retract-02-retracted.png"))
    finally:
        if server is not None:
            server.stop()
        engine.close()
