"""The ``moirae`` command line: thin commands over :class:`moirae.Engine`.

Every command has ``--help``; bad input exits non-zero with one line saying why.
"""

from __future__ import annotations

import argparse
import signal
import sys

from moirae.base.errors import MoiraeError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _duration(text: str) -> float:
    from moirae.config import parse_duration

    try:
        seconds = parse_duration(text).total_seconds()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive, got {text!r}")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="moirae", description="Moirae: history-enhanced monitoring on Spark and PostgreSQL.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    run = sub.add_parser("run", help="run the main job: stream the scenario into the archive, detect, recall",
                         description="Run the main job on the configured scenario until --duration ends or Ctrl-C.")
    run.add_argument("--config", metavar="F", help="YAML file merged over config/moirae.yaml")
    run.add_argument("--scenario", choices=["cluster", "host"], help="what to stream (default: from config)")
    run.add_argument("--duration", type=_duration, metavar="D",
                     help="stop after D (e.g. 60, 30s, 5m); default: until Ctrl-C")
    run.add_argument("--json", action="store_true", help="print the final summary as one JSON object")

    arch = sub.add_parser("archive", help="inspect the archive", description="Inspect the archive.")
    arch_sub = arch.add_subparsers(dest="archive_command", required=True, parser_class=_Parser, metavar="ACTION")
    st = arch_sub.add_parser("status", help="chunks per stream and tier, rows, late rows, dead letters",
                             description="Show chunks per stream and tier, rows, late rows and dead letters.")
    st.add_argument("--config", metavar="F", help="YAML file merged over config/moirae.yaml")
    st.add_argument("--json", action="store_true", help="print one JSON object")
    con = sub.add_parser("console", help="serve the HTTP API and the alert console over the database",
                         description="Serve the HTTP API and the console page (read-only over the database: "
                                     "no engine runs in this process, so steering answers 409).")
    con.add_argument("--config", metavar="F", help="YAML file merged over config/moirae.yaml")
    con.add_argument("--host", metavar="H", help="bind address (default: api.host; beyond loopback needs api.token)")
    con.add_argument("--port", type=int, metavar="P", help="TCP port (default: api.port; 0 picks a free one)")
    con.add_argument("--duration", type=_duration, metavar="D", help="stop after D; default: until Ctrl-C")

    rem = sub.add_parser("rematerialize", help="re-process raw archived chunks into a query's event and context streams",
                         description="Re-process raw archived chunks, in batch on Spark, into the event and context "
                                     "streams of an event-query of the configured scenario (M 4.2). Idempotent: a "
                                     "chunk's materialization is replaced, never duplicated; --resume skips chunks "
                                     "already materialized.")
    rem.add_argument("--query", required=True, metavar="Q", help="the event-query, e.g. overload")
    rem.add_argument("--since", type=_time, metavar="T", help="oldest event time (ISO 8601, with zone)")
    rem.add_argument("--until", type=_time, metavar="T", help="newest event time, exclusive (ISO 8601)")
    rem.add_argument("--resume", action="store_true", help="skip chunks already materialized")
    rem.add_argument("--batch", type=_tickets, default=24, metavar="N", help="chunks per Spark job (default 24)")
    rem.add_argument("--config", metavar="F", help="YAML file merged over config/moirae.yaml")
    rem.add_argument("--scenario", choices=["cluster", "host"], help="whose queries (default: from config)")

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
    rp.add_argument("--speedup", type=_speedup, metavar="X",
                    help="scenario seconds per wall second, or max (default); not with --analyze")
    rp.add_argument("--stream", metavar="NAME", help="archive stream name (default: replay); not with --analyze")
    rp.add_argument("--analyze", action="store_true",
                    help="write nothing: measure the file's disorder, or with --out-of-order the delivery order "
                         "the replay would produce (a dry run)")
    rp.add_argument("--json", action="store_true", help="print one JSON object")
    rp.add_argument("--config", metavar="F", help="YAML file merged over config/moirae.yaml")

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
        if name == "accelerate":
            sp.add_argument("--tickets", type=_tickets, metavar="N", help="tickets to add (default: 100)")
        sp.add_argument("--config", metavar="F", help="YAML file merged over config/moirae.yaml")
        sp.add_argument("--json", action="store_true", help="print the API's answer as one JSON object")
    return p


def _speedup(text: str):
    if text == "max":
        return text
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"speedup must be a positive number or max, got {text!r}") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"speedup must be a positive number or max, got {text!r}")
    return x


def _time(text: str):
    from datetime import datetime

    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if t.tzinfo is None:
        raise argparse.ArgumentTypeError(f"time needs a zone (e.g. {text}Z): {text!r}")
    return t


def _tickets(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"tickets must be a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"tickets must be a positive integer, got {text!r}")
    return n


def main(argv: list[str] | None = None) -> int:
    """Run one command. Whatever happens, it ends in at most one line on stderr: a
    :class:`MoiraeError` says what was wrong; anything else (a bug, a lost database) is
    written with its traceback to ``<data_dir>/logs/cli.log`` under an error id, and the
    line names the id and the file. Never a traceback on the terminal."""
    args = build_parser().parse_args(argv)
    key = args.command if args.command != "archive" else f"archive {args.archive_command}"
    if argv is None:  # the real command line, not a test calling main(): own the process's logging
        _route_logging(args)
    try:
        from moirae import commands  # noqa: F401  (registers the command functions)
        from moirae.commands.registry import COMMANDS

        return COMMANDS[key](args)
    except MoiraeError as exc:
        print(f"moirae: error: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: logged, one line
        error_id, path = _log_failure(args, key, exc)
        print(f"moirae: error: {key} failed: {type(exc).__name__}: {_one_line(str(exc))} "
              f"(error id {error_id}; details in {path})", file=sys.stderr)
        return 1


def _route_logging(args) -> None:
    """Library and thread errors go to ``<data_dir>/logs/cli.log`` in full and to the
    terminal as one line each (the terminal is the alert output of ``moirae run``)."""
    from moirae.errorlog import log_dir, route_logging

    try:
        route_logging(log_dir(_data_dir(args)) / "cli.log")
    except OSError:  # no writable log directory: keep Python's defaults
        pass


def _data_dir(args):
    try:
        from moirae import config

        return config.load(getattr(args, "config", None)).data_dir
    except Exception:  # noqa: BLE001 - the configuration may be what fails; the command will say so
        return None


def _one_line(text: str, limit: int = 300) -> str:
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _log_failure(args, key: str, exc: BaseException) -> tuple[str, str]:
    """Write ``exc`` to the CLI's log file; returns (error id, file). The log directory
    comes from the configuration when it loads, else ``.moirae/logs``."""
    from moirae.errorlog import file_logger, log_dir, record_failure

    try:
        path = log_dir(_data_dir(args)) / "cli.log"
        logger = file_logger("moirae.cli", path)
        error_id = record_failure(logger, f"moirae {key}", exc)
        if any(getattr(h, "failing", False) for h in logger.handlers):  # e.g. its disk is full
            raise OSError(f"cannot write {path}")
        return error_id, str(path)
    except OSError:  # not even a log file: keep the traceback somewhere findable
        import tempfile
        import traceback

        try:
            fd, tmp = tempfile.mkstemp(prefix="moirae-error-", suffix=".log")
            with open(fd, "w") as fh:
                traceback.print_exception(exc, file=fh)
        except OSError:
            return "-", "nowhere (no log file could be written)"
        return "-", tmp


def install_sigterm() -> None:
    """Treat SIGTERM like Ctrl-C so `run` stops cleanly and prints its summary."""
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))


if __name__ == "__main__":
    sys.exit(main())
