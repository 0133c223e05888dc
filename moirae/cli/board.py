"""The terminal printout of ``moirae run``: one block per incident.

Alerts of one key in consecutive windows are one incident (:mod:`similarity.incidents`),
so the terminal shows incidents, not windows. Each block holds:

- the incident's id, key, number of alerts and time span, and ``NOVEL`` when the latest
  alert's Similarity Recall ended with no past incident similar enough
  (:mod:`similarity.novelty`), with the span searched when that was not the whole archive;
- the latest alert's attributes and context;
- the norm's latest estimate (any Recall's current rows), with the interval of history
  it covers so far;
- the *current* top-k similar past incidents of the latest alert, sorted by score,
  each with its resolution and top shared terms (:mod:`similarity.explain`), and how far
  back the search has gone and what remains (:mod:`recall.replica2`).

:class:`Board` holds that state, applying each output's revisions
(:func:`recall.revision_ops.apply_revision`), so a block never shows a retracted or
duplicate row. It keeps the incidents with the latest alerts, within bounds, so a run
of weeks does not grow it without end. :class:`BoardPrinter` follows the engine's bus:
on a terminal it redraws the blocks of the latest alerted incidents in place (rich
``Live``); otherwise it prints a block once each time its text changes. When the run
ends it prints every kept block's final state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from recall.api import OutputKind
from recall.revision_ops import apply_revision

STATUS_KEY = "__status__"


@dataclass
class _Alert:
    eid: str
    attrs: dict
    context: list
    similar: dict[str, dict] = field(default_factory=dict)  # operator -> {key: row}
    status: dict[str, dict] = field(default_factory=dict)  # operator -> status row
    recall: dict[str, dict] = field(default_factory=dict)  # operator -> {key: row}
    covered: dict[str, Any] = field(default_factory=dict)  # operator -> Interval


@dataclass
class _Block:
    id: str
    event: str
    alerts: list[_Alert] = field(default_factory=list)  # the latest few (Board.keep_alerts)
    first_ts: str = ""
    last_ts: str = ""
    count: int = 0  # alerts of the incident seen, kept or not


def _fmt(v: Any) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


#: incidents a board keeps: those with the latest alerts (a block shows the incident's
#: latest alert; the API and console list every incident from the incident store)
KEEP_BLOCKS = 500
#: alerts a block keeps: the latest, and the latest with similar incidents found
KEEP_ALERTS = 8


class Board:
    """Blocks of incidents, updated from bus items (module doc). ``similarity`` names
    the Similarity Recall operators; ``incident_of(event_message)`` gives an alert's
    incident id.

    A run lasts as long as its operator wants, so the board is bounded: the
    ``keep_blocks`` incidents with the latest alerts, and in each the ``keep_alerts``
    latest alerts (never the latest one with similar incidents, which the block
    shows). Outputs that arrive later for an alert no longer kept are not shown."""

    def __init__(self, similarity: set[str], incident_of: Callable[[Mapping[str, Any]], str],
                 keep_blocks: int = KEEP_BLOCKS, keep_alerts: int = KEEP_ALERTS) -> None:
        self.similarity = set(similarity)
        self.incident_of = incident_of
        self.keep_blocks, self.keep_alerts = max(1, keep_blocks), max(1, keep_alerts)
        self.blocks: dict[str, _Block] = {}  # least recently alerted first
        self._alert_block: dict[str, str] = {}
        self.alerts = 0
        self.dropped_blocks = 0  # incidents no longer kept

    def apply(self, item: Any) -> str | None:
        """Take one bus item; return the id of the incident whose block changed."""
        if isinstance(item, dict):
            if item.get("type") != "event":
                return None
            self.alerts += 1
            iid = str(self.incident_of(item))
            block = self.blocks.pop(iid, None) or _Block(iid, str(item.get("event", "")))
            self.blocks[iid] = block  # the latest alerted last
            block.alerts.append(_Alert(str(item["eid"]), dict(item.get("attrs") or {}), list(item.get("context") or [])))
            block.count += 1
            ts = str(item.get("ts", ""))
            block.first_ts, block.last_ts = block.first_ts or ts, ts
            self._alert_block[str(item["eid"])] = iid
            self._trim(block)
            return iid
        iid = self._alert_block.get(getattr(item, "eid", None))
        if iid is None or item.kind is OutputKind.BOUNDARY:
            return None
        alert = next(a for a in self.blocks[iid].alerts if a.eid == item.eid)
        op = item.operator
        if op in self.similarity and item.key == STATUS_KEY:
            if item.kind is OutputKind.INSERT:  # a partial status is replaced by DELETE + INSERT
                alert.status[op] = dict(item.row)
        else:
            apply_revision((alert.similar if op in self.similarity else alert.recall).setdefault(op, {}), item)
        if item.covered is not None:
            alert.covered[op] = item.covered
        return iid

    def _trim(self, block: _Block) -> None:
        """Keep the board within its bounds (class doc)."""
        while len(block.alerts) > self.keep_alerts:
            shown = next((a for a in reversed(block.alerts) if any(a.similar.values()) or a.status), None)
            gone = next(a for a in block.alerts if a is not shown)
            block.alerts.remove(gone)
            self._alert_block.pop(gone.eid, None)
        while len(self.blocks) > self.keep_blocks:
            old = self.blocks.pop(next(iter(self.blocks)))
            for a in old.alerts:
                self._alert_block.pop(a.eid, None)
            self.dropped_blocks += 1

    def render(self, iid: str, k: int | None = None) -> str:
        """The block of one incident as text."""
        b = self.blocks[iid]
        latest = b.alerts[-1]
        shown = next((a for a in reversed(b.alerts) if any(a.similar.values()) or a.status), latest)
        novel = [s for s in shown.status.values() if s.get("novel")]
        span = b.first_ts[11:16] + (f"-{b.last_ts[11:16]}" if b.last_ts != b.first_ts else "")
        lines = [f"INCIDENT {iid}  {b.event}  {b.count} alert{'s' * (b.count != 1)}  {span}"
                 + (f"  NOVEL: {_novel_of(novel[0])}" if novel else "")]
        attrs = ", ".join(f"{k_}={_fmt(v)}" for k_, v in latest.attrs.items())
        ctx = ", ".join(sorted({f"{k_}={v}" for t in latest.context for k_, v in t.items()}))
        lines.append(f"  latest alert {latest.eid}  {attrs}")
        lines.append(f"  context: {ctx or '(none)'}")
        for op, rows in latest.recall.items():
            for row in rows.values():
                vals = ", ".join(f"{k_} {_fmt(v)}" for k_, v in row.items()
                                 if isinstance(v, int | float) and not isinstance(v, bool))
                if "disposition" in row:  # a rule's verdict (moirae.rules): what it decided, and whether for good
                    vals = (f"{row['disposition']}{'' if row.get('final') else ' (provisional)'}"
                            + (f", {vals}" if vals else ""))
                cov = latest.covered.get(op)
                where = "" if cov is None else (f" over {cov.start:%Y-%m-%d %H:%M} .. {cov.end:%Y-%m-%d %H:%M} "
                                                 f"({(cov.end - cov.start).total_seconds() / 86400:.1f} d of history)")
                lines.append(f"  {op}: {vals}{where}")
        for op in dict.fromkeys([*shown.similar, *shown.status]):
            rows = shown.similar.get(op, {})
            status = shown.status.get(op, {})
            state = status.get("status", "searching")
            cov = shown.covered.get(op)
            back = "" if cov is None else f", searched back to {cov.start:%Y-%m-%d %H:%M}"
            if status.get("searched_back_to"):  # replica2: how far back, what remains (recall.replica2)
                back = f", searched back to {str(status['searched_back_to'])[:16].replace('T', ' ')}"
            if status.get("remaining_chunks"):
                back += f", {status['remaining_chunks']} chunk(s) of older history to go"
            lines.append(f"  similar past incidents ({op}, {state}{back}):")
            ranked = sorted(rows.values(), key=lambda r: (-float(r.get("score", 0)), str(r.get("incident", ""))))
            for i, r in enumerate(ranked[:k] if k else ranked, 1):
                terms = ", ".join(f"{t['term']} {t['share']:.2f}" for t in r.get("shared_terms", [])[:3])
                res = r.get("resolution")
                lines.append(f"    {i}. {float(r.get('score', 0)):.2f}  {r.get('incident', r.get('past_eid'))}  "
                             f"{str(r.get('past_ts', ''))[:16]}  {r.get('windows', 1)} window(s)"
                             f"  {'resolved: ' + str(res) if res else 'no resolution'}"
                             + (f"  shared: {terms}" if terms else ""))
            if not rows:
                lines.append("    (none yet)")
        return "\n".join(lines)

    def render_all(self, last: int | None = None) -> str:
        ids = list(self.blocks)[-last:] if last else list(self.blocks)
        return "\n\n".join(self.render(i) for i in ids)


class BoardPrinter:
    """Follows an engine's bus and shows the :class:`Board` (module doc). ``engine`` is
    a :class:`~moirae.read.abc.ReadSurface`: its bus, Similarity Recall operators and
    incident store."""

    def __init__(self, engine, live: bool | None = None, out=None) -> None:
        from rich.console import Console

        self.console = Console(file=out) if out is not None else Console()
        self.live_mode = self.console.is_terminal if live is None else live
        self.sub = engine.bus.subscribe()
        self.board = Board(engine.similarity_operators(), _incident_of(engine.incidents))
        self._printed: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="moirae-alert-board", daemon=True)
        self._live = None

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def alerts(self) -> int:
        return self.board.alerts

    def start(self) -> BoardPrinter:
        if self.live_mode:
            from rich.live import Live

            self._live = Live("", console=self.console, refresh_per_second=4, transient=False)
            self._live.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following; print every incident's final block."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=5)
        self.sub.close()
        if self._live is not None:
            self._live.stop()
        if self.board.blocks:
            older = self.board.dropped_blocks
            print("\nfinal similar incidents per incident:\n" + self.board.render_all()
                  + (f"\n\n({older} older incident{'s' * (older != 1)} not kept here: the API and console list "
                     "every incident)" if older else ""), flush=True)

    def _loop(self) -> None:
        dirty: set[str] = set()
        last = 0.0
        while not self._stop.is_set():
            item = self.sub.get(timeout=0.25)
            if item is not None:
                iid = self.board.apply(item)
                if iid is not None:
                    dirty.add(iid)
            if dirty and (item is None or time.monotonic() - last > 0.25):
                self._show(dirty)
                dirty, last = set(), time.monotonic()

    def _show(self, changed: set[str]) -> None:
        if self._live is not None:
            from rich.text import Text

            self._live.update(Text(self.board.render_all(last=6)))
            return
        for iid in [i for i in self.board.blocks if i in changed]:
            text = self.board.render(iid)
            if self._printed.get(iid) != text:
                self._printed[iid] = text
                print(text, flush=True)
        if len(self._printed) > 2 * len(self.board.blocks):  # forget the incidents the board let go
            self._printed = {i: t for i, t in self._printed.items() if i in self.board.blocks}


def _novel_of(status: Mapping[str, Any]) -> str:
    """What a NOVEL label covers: the whole archive, or the span the search covered."""
    span = status.get("novel_span")
    if status.get("whole_archive", True) or not span:
        return "no similar past incident"
    return f"no similar past incident since {str(span[0])[:16].replace('T', ' ')} (older history not searched)"


def _incident_of(store) -> Callable[[Mapping[str, Any]], str]:
    """An alert's incident by the incident store's rule, applied as alerts arrive (the
    same rule and ids as the store: the eid of the incident's first alert)."""
    from similarity.incidents import LiveIncidents

    live = LiveIncidents(lambda event, attrs: store.config(event, attrs).rule)

    def of(msg: Mapping[str, Any]) -> str:
        event, attrs = str(msg.get("event", "")), dict(msg.get("attrs") or {})
        try:
            incident = live.assign(event, str(msg["eid"]), attrs, msg["ts"]).incident
            live.close(event, msg["ts"])  # as the store
            return incident
        except Exception:  # an alert the rule cannot place is its own incident
            return str(msg["eid"])

    return of
