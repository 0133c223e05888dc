"""Which horizon demotes each source stream (A 5.1, M 3.3): an event-query's input
follows Ananke's ``W - U``; a stream only a context-query reads follows that query's
event-query, ``W - window``, not its own watermark (which stands still once a sparse
source has nothing new); without a horizon, it keeps its own watermark."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from moirae.engine.maintenance import Maintenance

W = datetime(2024, 2, 12, tzinfo=UTC)
H = timedelta(hours=1)


@dataclass
class Flow:
    """What the maintenance pass reads of a live event-query's flow."""

    name: str
    inputs: tuple[str, ...]
    wm: datetime | None  # the sink's watermark
    U: timedelta = H
    query: SimpleNamespace = field(init=False)

    def __post_init__(self) -> None:
        self.query = SimpleNamespace(name=self.name, inputs=self.inputs)

    def horizon(self) -> datetime | None:
        return None if self.wm is None else self.wm - self.U


def horizons(flows, contexts):
    deploy = SimpleNamespace(flows={f.name: f for f in flows}, contexts=contexts)
    return Maintenance(None, None, None, None, deploy)._source_horizons()


def cq(inputs, window):
    return SimpleNamespace(inputs=tuple(inputs), window=window)


def test_a_context_only_stream_follows_its_event_query_less_the_context_window():
    got = horizons([Flow("hot", ("load",), W)], {"hot": [cq(["weather"], 6 * H)]})
    assert got == {"load": W - H, "weather": W - 6 * H}


def test_the_smallest_reach_wins_across_queries_and_reads():
    flows = [Flow("hot", ("load",), W), Flow("cold", ("load", "weather"), W - 2 * H, U=3 * H)]
    got = horizons(flows, {"hot": [cq(["weather"], 6 * H), cq(["load"], 30 * H)]})
    assert got["weather"] == W - 6 * H  # hot's 6-hour context; cold's own read reaches W - 5h only
    assert got["load"] == W - 30 * H  # hot's 30-hour context over load


def test_without_a_horizon_an_input_waits_and_a_context_only_stream_keeps_its_watermark():
    got = horizons([Flow("hot", ("load",), None)], {"hot": [cq(["weather"], 6 * H)]})
    assert got == {"load": None}
