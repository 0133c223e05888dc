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
    for add in (_run, _archive, _console, _rematerialize, _replay, _steer):
        add(sub)
    return p


def _run(sub) -> None:
    run = sub.add_parser("run", help="run the main job: stream the scenario into the archive, detect, recall",
                         description="Run the main job on the configured scenario until --duration ends or Ctrl-C.")
    run.add_argument("--config", metavar="F", help=CONFIG_HELP)
    run.add_argument("--scenario", choices=["cluster", "host"], help="what to stream (default: from config)")
    run.add_argument("--duration", type=duration, metavar="D",
                     help="stop after D (e.g. 60, 30s, 5m); default: until Ctrl-C")
    run.add_argument("--json", action="store_true", help="print the final summary as one JSON object")


def _archive(sub) -> None:
    arch = sub.add_parser("archive", help="inspect the archive", description="Inspect the archive.")
    arch_sub = arch.add_subparsers(dest="archive_command", required=True, parser_class=_Parser, metavar="ACTION")
    st = arch_sub.add_parser("status", help="chunks per stream and tier, rows, late rows, dead letters",
                             description="Show chunks per stream and tier, rows, late rows and dead letters.")
    st.add_argument("--config", metavar="F", help=CONFIG_HELP)
    st.add_argument("--json", action="store_true", help="print one JSON object")


def _console(sub) -> None:
    con = sub.add_parser("console", help="serve the HTTP API and the alert console over the database",
                         description="Serve the HTTP API and the console page (read-only over the database: "
                                     "no engine runs in this process, so steering answers 409).")
    con.add_argument("--config", metavar="F", help=CONFIG_HELP)
    con.add_argument("--host", metavar="H", help="bind address (default: api.host; beyond loopback needs api.token)")
    con.add_argument("--port", type=int, metavar="P", help="TCP port (default: api.port; 0 picks a free one)")
    con.add_argument("--duration", type=duration, metavar="D", help="stop after D; default: until Ctrl-C")


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
