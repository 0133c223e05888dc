"""The ``moirae`` argument parser: one function per command, each adding its sub-parser.

Every command has ``--help``; bad input exits with status 2 and one line saying why.
"""

from __future__ import annotations

import argparse

from moirae.cli.argtypes import duration, iso_time, speedup, tickets

CONFIG_HELP = "YAML file merged over config/moirae.yaml"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="moirae", description="Moirae: history-enhanced monitoring on Spark and PostgreSQL.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")
    for add in (_run, _archive, _console, _rematerialize, _replay, _steer, _monitors, _retract):
        add(sub)
    return p


def _run(sub) -> None:
    run = sub.add_parser("run", help="run the main job: stream the scenario into the archive, detect, recall",
                         description="Run the main job on the configured scenario until --duration ends or Ctrl-C.")
    run.add_argument("--config", metavar="F", help=CONFIG_HELP)
    run.add_argument("--scenario", choices=["cluster", "host", "maritime"], help="what to stream (default: from config)")
    run.add_argument("--duration", type=duration, metavar="D",
                     help="stop after D (e.g. 60, 30s, 5m); default: until Ctrl-C")
    run.add_argument("--json", action="store_true", help="print the final summary as one JSON object")
    _tls(run)
    run.add_argument("--monitors", metavar="PATH",
                     help="deploy the monitor file PATH, or every *.yaml in folder PATH, once started (added to "
                          "or updating the monitors restored from the last run); with monitors (these or "
                          "restored ones) the scenario runs only if --scenario names it")


def _archive(sub) -> None:
    arch = sub.add_parser("archive", help="inspect the archive", description="Inspect the archive.")
    arch_sub = arch.add_subparsers(dest="archive_command", required=True, parser_class=_Parser, metavar="ACTION")
    st = arch_sub.add_parser("status", help="chunks per stream and tier, rows, late rows, dead letters",
                             description="Show chunks per stream and tier, rows, late rows and dead letters.")
    st.add_argument("--config", metavar="F", help=CONFIG_HELP)
    st.add_argument("--json", action="store_true", help="print one JSON object")
    ref = arch_sub.add_parser("reference", help="load or reload a reference table from a CSV file or a SELECT",
                              description="Load reference table NAME (no time attribute: an inventory, owners, "
                                          "teams) into the archive, or a new version of it; history- and context-"
                                          "queries read each alert's version.")
    ref.add_argument("name", metavar="NAME", help="the table's name, as queries read it")
    src = ref.add_mutually_exclusive_group(required=True)
    src.add_argument("--csv", metavar="FILE", help="a CSV file with a header row")
    src.add_argument("--sql", metavar="SELECT", help="one read-only SELECT on the archive's database")
    ref.add_argument("--key", metavar="COLS", help="the column(s) identifying a row, comma separated (first load)")
    ref.add_argument("--valid-from", type=iso_time, metavar="T",
                     help="when this version starts to hold (default: now; a first load: always)")
    refs = arch_sub.add_parser("references", help="list the reference tables",
                               description="List the reference tables: key, columns, version.")
    for sp in (ref, refs):
        sp.add_argument("--config", metavar="F", help=CONFIG_HELP)
        sp.add_argument("--json", action="store_true", help="print one JSON object")


def _console(sub) -> None:
    con = sub.add_parser("console", help="serve the HTTP API and the alert console over the database",
                         description="Serve the HTTP API and the console page (read-only over the database: "
                                     "no engine runs in this process, so steering answers 409).")
    con.add_argument("--config", metavar="F", help=CONFIG_HELP)
    con.add_argument("--host", metavar="H", help="bind address (default: api.host; beyond loopback needs api.token)")
    con.add_argument("--port", type=int, metavar="P", help="TCP port (default: api.port; 0 picks a free one)")
    con.add_argument("--duration", type=duration, metavar="D", help="stop after D; default: until Ctrl-C")
    _tls(con)


def _tls(cmd) -> None:
    cmd.add_argument("--tls-cert", metavar="PEM", help="serve the API over HTTPS with this certificate "
                                                       "(default: api.tls_cert; needs --tls-key)")
    cmd.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert (default: api.tls_key)")


def _rematerialize(sub) -> None:
    rem = sub.add_parser("rematerialize", help="re-process raw archived chunks into a query's event and context streams",
                         description="Re-process raw archived chunks, in batch on Spark, into the event and context "
                                     "streams of an event-query of the configured scenario (M 4.2). Idempotent: a "
                                     "chunk's materialization is replaced, never duplicated; --resume skips chunks "
                                     "already materialized.")
    rem.add_argument("--query", required=True, metavar="Q", help="the event-query, e.g. overload")
    rem.add_argument("--since", type=iso_time, metavar="T", help="oldest event time (ISO 8601, with zone)")
    rem.add_argument("--until", type=iso_time, metavar="T", help="newest event time, exclusive (ISO 8601)")
    rem.add_argument("--resume", action="store_true", help="skip chunks already materialized")
    rem.add_argument("--batch", type=tickets, default=24, metavar="N", help="chunks per Spark job (default 24)")
    rem.add_argument("--config", metavar="F", help=CONFIG_HELP)
    rem.add_argument("--scenario", choices=["cluster", "host"], help="whose queries (default: from config)")


def _replay(sub) -> None:
    rp = sub.add_parser("replay", help="replay a CSV/Parquet file into the archive, reproducibly out of order",
                        description="Replay FILE into the archive under --stream, delaying a fraction of its rows "
                                    "(reproducible out-of-order delivery, DEBS'19), or --analyze its disorder. "
                                    "An interrupted replay, run again with the same file and options, resumes "
                                    "where it stopped; a flag that would have no effect is an error.")
    rp.add_argument("file", metavar="FILE", help="a .csv or .parquet file with an event-time column")
    rp.add_argument("--ts-col", required=True, metavar="C", help="the event-time column")
    rp.add_argument("--ts-unit", choices=["s", "ms", "us", "ns"], help="unit of a numeric event-time column")
    rp.add_argument("--out-of-order", type=float, metavar="PCT", help="percent of rows delayed (0-100; default 0)")
    rp.add_argument("--min-delay", type=float, metavar="MS",
                    help="minimum delay of a delayed row (default 0; needs --out-of-order)")
    rp.add_argument("--max-delay", type=float, metavar="MS",
                    help="maximum delay of a delayed row (default 2000; needs --out-of-order)")
    rp.add_argument("--distribution", metavar="D",
                    help="uniform (default), exponential or normal (needs --out-of-order)")
    rp.add_argument("--seed", type=int, metavar="N",
                    help="random seed, same seed same output (default 0; needs --out-of-order)")
    rp.add_argument("--speedup", type=speedup, metavar="X",
                    help="scenario seconds per wall second, or max (default); not with --analyze")
    rp.add_argument("--stream", metavar="NAME", help="archive stream name (default: replay); not with --analyze")
    rp.add_argument("--analyze", action="store_true",
                    help="write nothing: measure the file's disorder, or with --out-of-order the delivery order "
                         "the replay would produce (a dry run)")
    rp.add_argument("--json", action="store_true", help="print one JSON object")
    rp.add_argument("--config", metavar="F", help=CONFIG_HELP)


def _steer(sub) -> None:
    for name, what in (("cancel", "cancel every recall task of one or more events"),
                       ("accelerate", "give every recall task of an event more tickets")):
        sp = sub.add_parser(name, help=f"{what} (through the running engine's HTTP API)",
                            description=f"{what[0].upper()}{what[1:]}, through the HTTP API of the running "
                                        "engine (address from the configuration; token from api.token or "
                                        "MOIRAE_API_TOKEN); prints what changed.")
        if name == "cancel":
            sp.add_argument("eid", metavar="EID", nargs="+", help="the event id (several: cancelled in one request)")
        else:
            sp.add_argument("eid", metavar="EID", help="the event id")
            sp.add_argument("--tickets", type=tickets, metavar="N", help="tickets to add (default: 100)")
        sp.add_argument("--config", metavar="F", help=CONFIG_HELP)
        sp.add_argument("--json", action="store_true", help="print the API's answer as one JSON object")


def _monitors(sub) -> None:
    dep = sub.add_parser("deploy", help="deploy a monitor file (or a folder of them) on the running engine",
                         description="Deploy FILE (a monitor file, or every *.yaml in a folder) on the running "
                                     "engine through its HTTP API: the same version again changes nothing, a "
                                     "changed file is a new version. A bad file is refused whole.")
    dep.add_argument("file", metavar="FILE", help="a monitor file (.yaml) or a folder of them")
    und = sub.add_parser("undeploy", help="retire a monitor from the running engine",
                         description="Stop the monitor's streaming queries, cancel its recall tasks and free its "
                                     "state on the running engine; its archived streams are kept unless "
                                     "--drop-archive.")
    und.add_argument("name", metavar="NAME", help="the monitor's name")
    und.add_argument("--drop-archive", action="store_true",
                     help="also drop its archived streams, provenance tables, similarity state and checkpoints")
    mon = sub.add_parser("monitors", help="list the deployed monitors: state, rates, open tasks, materialized span",
                         description="List the running engine's monitors (state, rows/s, alerts, open recall "
                                     "tasks, materialized span); with no engine running, the deployed set the "
                                     "database records.")
    for sp in (dep, und, mon):
        sp.add_argument("--config", metavar="F", help=CONFIG_HELP)
        sp.add_argument("--json", action="store_true", help="print the answer as JSON")


def _retract(sub) -> None:
    ret = sub.add_parser("retract", help="mark source rows bad (or correct them); the alerts they fed are re-checked",
                         description="Retract source rows on the running engine (through its HTTP API): they are "
                                     "flagged, never deleted, and every alert they fed is evaluated again; one that "
                                     "no longer stands is retracted with the reason, its incident, norms and "
                                     "similar-incident lists revised. --set corrects the rows instead; --undo ID "
                                     "undoes a retraction; --list lists them.")
    look = sub.add_parser("lookup", help="which alerts source rows fed, which are open, whether more can come",
                          description="Forward provenance of source rows on the running engine: the alerts they "
                                      "fed, which are still open, and whether a future alert can still use them.")
    for sp in (ret, look):
        sp.add_argument("--ids", type=lambda s: [int(i) for i in s.split(",") if i.strip()], metavar="ID,ID",
                        help="source ids (the archive's _sid), comma separated")
        sp.add_argument("--stream", metavar="S", help="the archived source stream")
        sp.add_argument("--key", metavar="COL=VALUE", help="only rows whose column COL equals VALUE")
        sp.add_argument("--start", type=iso_time, metavar="T", help="rows at or after T (ISO 8601 with zone)")
        sp.add_argument("--end", type=iso_time, metavar="T", help="rows before T (ISO 8601 with zone)")
        sp.add_argument("--where", metavar="SQL", help="one SQL condition over the stream's columns")
        sp.add_argument("--config", metavar="F", help=CONFIG_HELP)
        sp.add_argument("--json", action="store_true", help="print the API's answer as one JSON object")
    ret.add_argument("--reason", metavar="TEXT", help="why the rows are bad (required to retract)")
    ret.add_argument("--by", metavar="NAME", help="who retracts (recorded with the retraction and in the audit log)")
    ret.add_argument("--set", action="append", metavar="COL=VALUE",
                     help="a correction: the rows' new value of COL (repeatable)")
    ret.add_argument("--confirm", action="store_true",
                     help="retract even when the selection matches more than the configured share of the archive")
    ret.add_argument("--undo", type=int, metavar="ID", help="undo retraction ID")
    ret.add_argument("--list", action="store_true", help="list the retractions")
