"""Reading and driving the console's page without holding element references.

The console redraws parts of the page on every server-sent update, so a WebElement
found one moment can be detached the next (StaleElementReferenceException; it failed a
CI run). Reads here run as one script that finds and reads in the same turn of the
page's event loop; actions find their element afresh and retry when a redraw replaced it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Screenshots of each step, linked from the README; MOIRAE_SCREENSHOTS=DIR
# writes them elsewhere (e.g. to keep a checkout's committed ones as they are).
SHOTS = ROOT / (os.environ.get("MOIRAE_SCREENSHOTS") or "bench/results/console")

_ALL = "return [...document.querySelectorAll(arguments[0])]"


def wait(cond, timeout: float = 30.0, what: str = "condition", every: float = 0.2, state=None):
    """Poll ``cond`` until it returns something truthy; raise naming ``what`` on timeout,
    with what ``state()`` then shows (the page's feedback, say: a rare CI timeout is
    otherwise a dead end)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = "" if state is None else f"; state then: {state()!r}"
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{seen}")
        time.sleep(every)


def count(browser, css: str) -> int:
    return browser.execute_script(_ALL + ".length", css)


def texts(browser, css: str) -> list[str]:
    """Texts of the matching elements, read in one script (a redraw cannot stale them)."""
    return browser.execute_script(_ALL + ".map(e => e.innerText)", css)


def text(browser, css: str) -> str:
    found = texts(browser, css)
    return found[0] if found else ""


def attrs(browser, css: str, name: str) -> list[str | None]:
    """Attribute ``name`` of each matching element, read in one script."""
    return browser.execute_script(_ALL + ".map(e => e.getAttribute(arguments[1]))", css, name)


def value(browser, css: str) -> str | None:
    """The live ``value`` of the first matching input (not its attribute)."""
    return browser.execute_script("const e = document.querySelector(arguments[0]); return e ? e.value : null", css)


def _retry(browser, css: str, act, what: str, timeout: float = 10.0):
    from selenium.common.exceptions import ElementNotInteractableException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while True:
        try:
            found = browser.find_elements(By.CSS_SELECTOR, css)
            if found:
                return act(found[0])
            error: Exception = AssertionError(f"no element matches {css!r}")
        except (StaleElementReferenceException, ElementNotInteractableException) as e:
            error = e  # redrawn between finding and acting: find it again
        if time.monotonic() > deadline:
            raise AssertionError(f"could not {what} {css!r} within {timeout:.0f} s: {error}") from error
        time.sleep(0.1)


def click(browser, css: str) -> None:
    _retry(browser, css, lambda e: e.click(), "click")


def click_all(browser, css: str) -> None:
    """Click every match, e.g. each feedback line's dismiss button, until none is left."""
    deadline = time.monotonic() + 10
    while count(browser, css) and time.monotonic() < deadline:
        click(browser, css)
        time.sleep(0.05)


def type_into(browser, css: str, keys: str, clear: bool = True) -> None:
    def act(e):
        if clear:
            e.clear()
        e.send_keys(keys)

    _retry(browser, css, act, "type into")


def sideways(browser) -> list[int]:
    """How far the page, the main pane and the side pane scroll sideways (px)."""
    return browser.execute_script(
        "const d=document.documentElement, m=document.querySelector('#main'), s=document.querySelector('#side');"
        "return [d.scrollWidth - d.clientWidth, m.scrollWidth - m.clientWidth, s.scrollWidth - s.clientWidth];")


def console_errors(browser) -> list[dict]:
    """The browser console's SEVERE entries since the last call."""
    return [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
