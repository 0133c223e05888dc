"""The ``moirae`` command line: thin commands over :class:`moirae.Engine`.

:func:`main` parses (:mod:`moirae.cli.parser`) and runs one command (the modules of
:mod:`moirae.cli.commands`); whatever happens, it ends in at most one line on stderr.
"""

from __future__ import annotations

import sys

from moirae.base.errors import MoiraeError
from moirae.cli.parser import build_parser


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
        from moirae.cli import commands  # noqa: F401  (registers the command functions)
        from moirae.cli.commands.registry import COMMANDS

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
    from moirae.runtime.errorlog import log_dir, route_logging

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
    """The first line of ``text``, secrets redacted (:mod:`moirae.base.redact`), at most ``limit`` long."""
    from moirae.base.redact import redact

    first = redact(next((ln.strip() for ln in text.splitlines() if ln.strip()), ""))
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _log_failure(args, key: str, exc: BaseException) -> tuple[str, str]:
    """Write ``exc`` to the CLI's log file; returns (error id, file). The log directory
    comes from the configuration when it loads, else ``.moirae/logs``."""
    from moirae.runtime.errorlog import file_logger, log_dir, record_failure

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
            from moirae.base.redact import redact

            with open(fd, "w") as fh:
                fh.write(redact("".join(traceback.format_exception(exc))))
        except OSError:
            return "-", "nowhere (no log file could be written)"
        return "-", tmp
