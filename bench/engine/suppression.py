"""Suppression by the historical norm on the cluster scenario's ground truth (M 3.2, fig. 2).

The cluster scenario (``config/scenarios/cluster.yaml``) plants bandwidth overloads
(``causes`` with ``metric: bw``) on its servers; which 5-minute window of which server
an overload touches is the ground truth (:mod:`moirae.sources.cluster`). The event-query
of M fig. 1 here uses a *sensitive* threshold (180 Mbit/s instead of the scenario's
600), so it also fires on the afternoon peaks of the busier servers: alerts that are not
incidents, as a real first threshold does.

Each alert goes through a real engine's path without Spark: logged in the event log
(where the rule's gate stands before the incident store), its norm Recall (the server's
mean and standard deviation of ``bw`` over the 7 days before it, M fig. 2, read chunk by
chunk, newest first, by the Recall Manager over the real Archiver in PostgreSQL), and the
suppress rule (``k`` standard deviations, :mod:`moirae.rules`). Reported, from the final
dispositions:

- the share of suppressed alerts that were not real incidents (how clean suppression is);
- the share of real incidents wrongly suppressed: a planted overload that raised alerts
  and had every one of them suppressed never pages anyone (target <= 2 %);
- baseline in the same run: without the rule every alert pages (false pages = every
  alert that is not an incident); and the rule judged on its *first estimate* only (the
  newest chunk's norm, before revisions), read from the same run's change log.

Run: ``python -m bench suppression [--quick]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import pandas as pd
import yaml

from bench.harness import ROOT, exit_code, percentile, publish, target

MEASURES = ("bench/engine/suppression.py", "moirae/rules", "recall/revision_ops.py", "recall/operator.py",
            "moirae/sources/cluster.py")

NORM_SQL = ("SELECT h.sid, avg(h.bw) AS mean_bw, stddev(h.bw) AS sd_bw, count(*) AS n "
            "FROM metrics h WHERE h.sid = :sid GROUP BY h.sid")
THRESHOLD = 180.0
WRONG_TARGET = 0.02


def scenario(days: int, servers: int):
    from moirae.sources.cluster import ClusterScenario
    from moirae.sources.cluster_config import parse_cluster_config

    path = ROOT / "config" / "scenarios" / "cluster.yaml"
    raw = yaml.safe_load(path.read_text())
    raw.update(history_days=days, servers=servers)
    return ClusterScenario(parse_cluster_config(raw, str(path)))


def alerts_and_truth(g, eval_from_ns: int, end_ns: int, metrics: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The event-query's alerts (5-minute windows with avg bw > THRESHOLD, stamped at the
    window's end) in the evaluated span, each labelled with the planted overload it
    belongs to (None: not an incident)."""
    m = metrics[metrics["ts"] >= pd.Timestamp(eval_from_ns, tz="UTC")]
    w = m.assign(start=m["ts"].dt.floor("5min")).groupby(["sid", "start"], as_index=False)["bw"].mean()
    w = w[w["bw"] > THRESHOLD].reset_index(drop=True)
    w["ts"] = w["start"] + pd.Timedelta(minutes=5)
    w["eid"] = w["sid"] + ":" + w["ts"].dt.strftime("%Y-%m-%dT%H:%M")
    cfg = g.config
    planted = [i for i in g.incidents_touching(eval_from_ns - 3600 * 10**9, end_ns)
               if cfg.causes[i.cause].metric == "bw"]
    w["incident"] = None
    for inc in planted:
        s, e = pd.Timestamp(inc.onset_ns, tz="UTC"), pd.Timestamp(inc.end_ns, tz="UTC")
        sel = (w["sid"] == inc.sid) & (w["start"] < e) & (w["ts"] > s)
        w.loc[sel & w["incident"].isna(), "incident"] = str(inc.iid)
    return w, {str(i.iid): cfg.causes[i.cause].name for i in planted}


def run_engine(g, metrics: pd.DataFrame, alerts: pd.DataFrame, k: float, data_dir: Path, timeout: float):
    """Every alert through the event log, the norm Recall and the suppress rule of a real
    engine (no Spark queries); returns ``{eid: disposition detail}`` and the seconds taken."""
    from bench.recall._common import database
    from moirae import Engine
    from moirae.ingest.events import EventRecord
    from recall.operator import Recall

    db = database("suppression")
    engine = Engine.from_config(None, data_dir=str(data_dir), postgres={"dsn": db.dsn, "schema": db.schema},
                                archive={"chunk_span": "12h", "chunk_target_rows": 0},
                                recall={"max_concurrent": 2})
    try:
        from archive.streams import StreamSpec

        engine.archiver.register_stream(StreamSpec.build(
            "metrics", "ts", {"sid": "text", "cpu": "double", "mem": "double", "bw": "double"}, indexes=[("sid",)]))
        t0 = time.perf_counter()
        for i, (_, part) in enumerate(metrics.groupby(metrics["ts"].dt.floor("1D"))):
            engine.archiver.append("metrics", -1 - i, part.reset_index(drop=True), bulk=True)
        load_s = time.perf_counter() - t0
        engine.deploy.manager.register(Recall("norm", NORM_SQL, store=engine.archiver, period=timedelta(days=7),
                                              time_column="h.ts"))
        engine.deploy.incidents.configure("overload", keys="sid", window=timedelta(minutes=5), metric="avg_bw",
                                          threshold=THRESHOLD, series=("metrics", "bw"), norm="norm")
        engine.rule("overload", "norm", "suppress", name="within_norm", k=k, hold="600s")
        t1 = time.perf_counter()
        for _, batch in alerts.groupby(alerts["ts"].dt.floor("30min")):
            recs = [EventRecord("overload", r.eid, r.ts.to_pydatetime(), {"sid": r.sid, "avg_bw": float(r.bw)})
                    for r in batch.itertuples()]
            for rec in engine.deploy.events.add(recs):
                engine.deploy.manager.submit(rec.as_event(), ["norm"])
        deadline = time.monotonic() + timeout
        eids = list(alerts["eid"])
        while time.monotonic() < deadline:
            got = engine.dispositions.of(eids)
            if len(got) == len(eids) and all(d["final"] for d in got.values()):
                break
            time.sleep(0.2)
        run_s = time.perf_counter() - t1
        details = {eid: engine.dispositions.get(eid) for eid in eids}
        opened = engine.incidents.incident_of(eids)
        status = engine.rules.status()
    finally:
        engine.close()
        db.drop_schema()
        db.close()
    return details, opened, status, load_s, run_s


def first_estimate(detail: dict) -> str:
    """The first disposition other than pending (the rule's first estimate)."""
    for c in detail["changes"]:
        if c["after"] != "pending":
            return c["after"]
    return detail["disposition"]


def _first_at(detail: dict | None, pred):
    """When the first change of ``detail`` matching ``pred`` happened (None: never)."""
    for c in (detail or {}).get("changes", []):
        if pred(c):
            return pd.Timestamp(c["at"])
    return None


def summarize(alerts: pd.DataFrame, details: dict, opened: dict, causes: dict) -> dict:
    a = alerts.copy()
    a["real"] = a["incident"].notna()
    a["final"] = [details[e]["disposition"] if details[e] else "missing" for e in a["eid"]]
    a["is_final"] = [bool(details[e] and details[e]["final"]) for e in a["eid"]]
    a["first"] = [first_estimate(details[e]) if details[e] else "missing" for e in a["eid"]]
    a["opened"] = a["eid"].isin(opened)
    a["z"] = [((details[e] or {}).get("verdicts", {}).get("within_norm") or {}).get("z") for e in a["eid"]]
    sup, first_sup = a["final"] == "suppressed", a["first"] == "suppressed"
    real_inc = a[a["real"]].groupby("incident")
    wrong = [i for i, grp in real_inc if (grp["final"] == "suppressed").all()]
    wrong_first = [i for i, grp in real_inc if (grp["first"] == "suppressed").all()]
    n_inc = real_inc.ngroups
    delays = []  # per real incident that paged: its first page after its first alert's first verdict
    for _i, grp in real_inc:
        verdict_at = [_first_at(details[e], lambda c: c["after"] != "pending") for e in grp["eid"]]
        paged_at = [_first_at(details[e], lambda c: c["note"].startswith("handed to the incident store"))
                    for e in grp["eid"]]
        v = [t for t in verdict_at if t is not None]
        p_ = [t for t in paged_at if t is not None]
        if v and p_:
            delays.append(max(0.0, (min(p_) - min(v)).total_seconds()))
    flips = sum(1 for d in details.values() if d and any(
        c["note"].startswith(("un-suppressed", "suppressed by a revision")) for c in d["changes"]))
    return {
        "alerts": len(a), "real_alerts": int(a["real"].sum()), "false_alerts": int((~a["real"]).sum()),
        "all_final": bool(a["is_final"].all()),
        "suppressed": int(sup.sum()), "suppressed_not_real": int((sup & ~a["real"]).sum()),
        "share_suppressed_not_real": float((sup & ~a["real"]).sum() / max(1, sup.sum())),
        "false_alerts_suppressed": float((sup & ~a["real"]).sum() / max(1, (~a["real"]).sum())),
        "real_alerts_suppressed": float((sup & a["real"]).sum() / max(1, a["real"].sum())),
        "real_incidents": n_inc, "incidents_wrongly_suppressed": wrong,
        "share_incidents_wrongly_suppressed": len(wrong) / max(1, n_inc),
        "wrongly_suppressed_causes": sorted(causes.get(i, "?") for i in wrong),
        "pages_with_rule": int(a["opened"].sum()), "false_pages_with_rule": int((a["opened"] & ~a["real"]).sum()),
        "pages_without_rule": len(a), "false_pages_without_rule": int((~a["real"]).sum()),
        "opened_but_suppressed": int((a["opened"] & sup).sum()),
        "first_estimate_suppressed": int(first_sup.sum()),
        "first_estimate_share_suppressed_not_real": float((first_sup & ~a["real"]).sum() / max(1, first_sup.sum())),
        "first_estimate_incidents_wrongly_suppressed": len(wrong_first) / max(1, n_inc),
        "revisions_crossing_the_line": flips,
        "page_delay_after_first_verdict_s": {"median": percentile(delays, 50), "max": max(delays, default=None),
                                             "incidents": len(delays)},
        "z_real_min": float(a.loc[a["real"], "z"].dropna().min()) if a["real"].any() else None,
        "z_false_max": float(a.loc[~a["real"], "z"].dropna().max()) if (~a["real"]).any() else None,
        "z": {"real": a.loc[a["real"], "z"].dropna().tolist(), "false": a.loc[~a["real"], "z"].dropna().tolist()},
    }


def _num(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 days of 12 servers, the last day evaluated")
    ap.add_argument("--k", type=float, default=3.0, help="the rule's line, in standard deviations")
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args(argv)
    days, servers, evaluated = (3, 12, 1) if args.quick else (10, 12, 3)
    name = "suppression_quick" if args.quick else "suppression"
    g = scenario(days, servers)
    start, end = g.config.start_ns, g.config.start_ns + days * 86_400 * 10**9
    metrics = g.frames(start, end, ("metrics",))["metrics"]
    eval_from = end - evaluated * 86_400 * 10**9
    alerts, causes = alerts_and_truth(g, eval_from, end, metrics)
    print(f"{len(metrics):,} metric rows, {days} days of {servers} servers; {len(alerts)} alerts in the last "
          f"{evaluated} days ({int(alerts['incident'].notna().sum())} of planted overloads)", flush=True)
    with tempfile.TemporaryDirectory(prefix="moirae-suppression-") as tmp:
        details, opened, status, load_s, run_s = run_engine(g, metrics, alerts, args.k, Path(tmp), args.timeout)
    s = summarize(alerts, details, opened, causes)
    s.update(k=args.k, threshold=THRESHOLD, days=days, servers=servers, evaluated_days=evaluated,
             metric_rows=len(metrics), load_seconds=load_s, run_seconds=run_s, rule_status=status)
    print(f"suppressed {s['suppressed']} of {s['alerts']} alerts: {s['share_suppressed_not_real']:.1%} not real "
          f"incidents; {s['false_alerts_suppressed']:.1%} of the false alerts suppressed; real incidents wrongly "
          f"suppressed {len(s['incidents_wrongly_suppressed'])}/{s['real_incidents']} "
          f"({s['share_incidents_wrongly_suppressed']:.1%}, target <= {WRONG_TARGET:.0%}); pages "
          f"{s['pages_with_rule']} (false {s['false_pages_with_rule']}) vs {s['pages_without_rule']} (false "
          f"{s['false_pages_without_rule']}) without the rule; first estimate only: wrongly suppressed "
          f"{s['first_estimate_incidents_wrongly_suppressed']:.1%}; {s['revisions_crossing_the_line']} alerts "
          f"crossed the line on a revision; {run_s:.1f} s", flush=True)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    labels = ["no rule", "rule, first estimate", f"rule, final (k={args.k:g})"]
    first_false_sup = int(round(s["first_estimate_share_suppressed_not_real"] * s["first_estimate_suppressed"]))
    false_paged = [s["false_alerts"], s["false_alerts"] - first_false_sup, s["false_alerts"] - s["suppressed_not_real"]]
    ax1.bar(labels, false_paged, color="tab:red")
    ax1.set_ylabel("alerts that are not incidents, paged")
    ax1.tick_params(axis="x", labelsize=8)
    ax2.hist([s["z"]["false"], s["z"]["real"]], bins=40, label=["not an incident", "planted overload"],
             color=["tab:red", "tab:blue"], stacked=True)
    ax2.axvline(args.k, color="k", ls="--", lw=1, label=f"k = {args.k:g}")
    ax2.axvline(-args.k, color="k", ls="--", lw=1)
    ax2.set_xlabel("final z of the alert against its norm (sd)")
    ax2.set_ylabel("alerts")
    ax2.legend(fontsize=8)
    fig.tight_layout()

    wrong_share = s["share_incidents_wrongly_suppressed"]
    ok = s["all_final"] and wrong_share <= WRONG_TARGET
    md = (
        f"### Suppression by the historical norm on the cluster scenario{' (quick)' if args.quick else ''}\n\n"
        f"The cluster scenario's planted bandwidth overloads are the ground truth; {days} days of {servers} "
        f"servers ({len(metrics):,} metric rows) in the real Archiver, alerts of the last {evaluated} days from a "
        f"sensitive threshold ({THRESHOLD:g} Mbit/s, so ordinary afternoon peaks fire too), each through the "
        f"event log, its norm Recall (7 days before it, newest chunk first) and a suppress rule at k = {args.k:g} "
        "(M fig. 2). Baselines from the same run: no rule (every alert pages) and the rule decided on its first "
        "estimate (the newest chunk's norm).\n\n"
        "| | alerts | not incidents | suppressed | suppressed that were not incidents | real incidents "
        "wrongly suppressed | pages (false) |\n|---|---|---|---|---|---|---|\n"
        f"| no rule | {s['alerts']} | {s['false_alerts']} | 0 | - | 0 / {s['real_incidents']} | "
        f"{s['pages_without_rule']} ({s['false_pages_without_rule']}) |\n"
        f"| rule, first estimate | {s['alerts']} | {s['false_alerts']} | {s['first_estimate_suppressed']} | "
        f"{s['first_estimate_share_suppressed_not_real']:.1%} | "
        f"{s['first_estimate_incidents_wrongly_suppressed']:.1%} | - |\n"
        f"| rule, final | {s['alerts']} | {s['false_alerts']} | {s['suppressed']} | "
        f"**{s['share_suppressed_not_real']:.1%}** | **{len(s['incidents_wrongly_suppressed'])} / "
        f"{s['real_incidents']} ({wrong_share:.1%})** | {s['pages_with_rule']} ({s['false_pages_with_rule']}) |\n\n"
        f"{s['false_alerts_suppressed']:.1%} of the alerts that were not incidents were suppressed; "
        f"{s['real_alerts_suppressed']:.1%} of the alerts of real incidents were (windows that only graze an "
        f"overload), without silencing their incident. {s['revisions_crossing_the_line']} alerts crossed the "
        f"line on a revision of their norm; a real incident's first page came "
        f"{_num(s['page_delay_after_first_verdict_s']['median'])} s (median; max "
        f"{_num(s['page_delay_after_first_verdict_s']['max'])} s) after its first alert's first verdict (its "
        "first estimate may suppress it until a revision un-suppresses it; all alerts were submitted at once, "
        "so this includes their recalls' queueing). Smallest final z among real-incident alerts "
        f"{_num(s['z_real_min'])}, largest among the others {_num(s['z_false_max'])}. Target: real incidents wrongly "
        f"suppressed <= {WRONG_TARGET:.0%}: **{'met' if ok else 'MISSED'}**. {run_s:.0f} s for all alerts' "
        "recall and rule.\n"
    )
    targets = [
        target("real incidents wrongly suppressed (cluster ground truth)", f"<= {WRONG_TARGET:.0%}",
               f"{wrong_share:.1%} ({len(s['incidents_wrongly_suppressed'])}/{s['real_incidents']})", ok,
               "" if s["all_final"] else "not every disposition was final before the timeout"),
    ]
    publish(name, s, md, fig, targets=targets)
    return exit_code(targets)


if __name__ == "__main__":
    raise SystemExit(main())
