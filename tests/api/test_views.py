"""``moirae.read.views.apply_revisions``: replaying any sequence of recall outputs gives, per
operator, the rows a consumer applying each revision in order would hold (M 4.6),
whatever order the outputs arrive in, with the full history kept."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from moirae.read.views import apply_revisions
from recall.api import Output, OutputKind

T = datetime(2024, 1, 1, tzinfo=UTC)
ops = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["k1", "k2", "k3"]),
                         st.sampled_from([OutputKind.INSERT, OutputKind.UPDATE, OutputKind.DELETE]),
                         st.integers(0, 9)), max_size=30)


@settings(max_examples=60, deadline=None)
@given(ops=ops, seed=st.integers(0, 1000))
def test_current_result_is_the_replayed_state(ops, seed):
    outputs, model = [], {}
    for seq, (op, key, kind, v) in enumerate(ops):
        outputs.append(Output(op, "e", T, kind, seq, key, {"v": v}, None))
        if kind is OutputKind.DELETE:
            model.get(op, {}).pop(key, None)
        else:
            model.setdefault(op, {})[key] = {"v": v}
    outputs.append(Output("a,b", "e", T, OutputKind.BOUNDARY, len(ops), "", {"tasks": 2}, None))
    random.Random(seed).shuffle(outputs)  # storage order is not seq order
    res = apply_revisions(outputs)
    assert set(res) == {op for op, *_ in ops}  # the boundary is no operator's result
    for op, r in res.items():
        assert {c["key"]: c["row"] for c in r["current"]} == model.get(op, {})
        assert [h["seq"] for h in r["history"]] == sorted(i for i, o in enumerate(ops) if o[0] == op)
        assert r["similarity"] is False
