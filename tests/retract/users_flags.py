"""The flags the context tests set on the small scenario's logins (tests/moirae/scenario_small.py):
around the overload of s2 at 03:04, the ``miner`` logins are retracted and ``alice``'s are
corrected to ``carol``, so a context read through the flags holds ``carol`` alone."""

from __future__ import annotations

import pandas as pd


def retract_miner_correct_alice(engine) -> None:
    lo, hi = pd.Timestamp("2024-03-01 02:55", tz="UTC"), pd.Timestamp("2024-03-01 03:05", tz="UTC")
    rows = engine.archiver.read("users", lo.to_pydatetime(), hi.to_pydatetime(), with_ids=True)
    s2 = rows[rows["sid"] == "s2"]
    miner = [int(x) for x in s2[s2["user"] == "miner"]["_sid"]]
    alice = [int(x) for x in s2[s2["user"] == "alice"]["_sid"]]
    assert miner and alice
    engine.retract({"ids": miner}, "the miner login was a replayed log", "ann", confirm=True)
    engine.retract({"ids": alice}, "alice's logins were carol's", "ann", set_values={"user": "carol"}, confirm=True)
