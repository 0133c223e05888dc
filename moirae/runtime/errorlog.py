"""Where failures are written down: log files, never the terminal.

A failure nobody anticipated (a bug, a lost database) is recorded in a log file with
its traceback under an *error id*; the user sees one line naming the id and the file
(the CLI, :mod:`moirae.cli`) or a JSON answer carrying the id (the HTTP API,
:mod:`moirae.api.guard`). Tracebacks never reach the alert output of ``moirae run``.

Log files live in ``<data_dir>/logs`` (``MOIRAE_LOG_DIR`` overrides it). A log file that
cannot be written (a full disk) is said once, in one line on stderr, not with a
traceback per record (:class:`QuietFileHandler`); writing resumes when it can. Log files
rotate at :data:`MAX_LOG_BYTES` (``MOIRAE_LOG_MAX_BYTES``), keeping :data:`LOG_BACKUPS`
old ones; the directory is created ``0700`` and its files ``0600``. Every record is
redacted (:mod:`moirae.base.redact`): a DSN's password or a token in a message or a
traceback never reaches a file or the terminal.

>>> len(new_error_id()), new_error_id() != new_error_id()
(12, True)
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
import threading
import uuid
from pathlib import Path

from moirae.base.redact import redact

ENV_LOG_DIR = "MOIRAE_LOG_DIR"
ENV_LOG_MAX_BYTES = "MOIRAE_LOG_MAX_BYTES"
MAX_LOG_BYTES = 10 << 20
LOG_BACKUPS = 5
_lock = threading.Lock()


def log_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The directory of Moirae's log files (created): ``MOIRAE_LOG_DIR`` if set, else
    ``<data_dir>/logs`` (``data_dir`` defaults to ``.moirae``)."""
    env = os.environ.get(ENV_LOG_DIR)
    path = Path(env) if env else Path(data_dir if data_dir is not None else ".moirae") / "logs"
    path = path.resolve()
    private_dir(path)
    return path


def private_dir(path: str | os.PathLike[str]) -> Path:
    """``path``, created ``0700`` (only its owner may enter) when it does not exist yet; an
    existing directory keeps its mode (it may be shared on purpose)."""
    path = Path(path)
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
    return path


class Redacting(logging.Formatter):
    """A formatter whose output (message and traceback) is redacted (:mod:`moirae.base.redact`)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class QuietFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating file handler (opened on the first record; rotated at
    ``MOIRAE_LOG_MAX_BYTES``, :data:`LOG_BACKUPS` old files kept; created ``0600``) whose
    write failures (OSError: a full disk, a removed directory) are reported once, in one
    line on stderr, instead of a traceback per record; the file is reopened with the next
    record, so logging resumes by itself once the file can be written again."""

    def __init__(self, filename, encoding: str | None = "utf-8") -> None:
        max_bytes = int(os.environ.get(ENV_LOG_MAX_BYTES, MAX_LOG_BYTES))
        super().__init__(filename, encoding=encoding, delay=True, maxBytes=max_bytes, backupCount=LOG_BACKUPS)
        self.failing = False
        self.lost = 0
        self._failed_now = False

    def _open(self):
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)

    def emit(self, record: logging.LogRecord) -> None:
        self._failed_now = False
        super().emit(record)
        if self.failing and not self._failed_now:
            self.failing = False
            sys.stderr.write(f"moirae: the log file {self.baseFilename} is writable again "
                             f"({self.lost} record(s) were lost)\n")

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            super().handleError(record)
            return
        self._failed_now = True
        self.lost += 1
        if not self.failing:
            self.failing = True
            sys.stderr.write(f"moirae: cannot write the log file {self.baseFilename}: "
                             f"{exc.strerror or exc}; its records are lost until it can be written\n")
        stream, self.stream = self.stream, None  # reopened with the next record
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def new_error_id() -> str:
    """A short random id that names one failure in the log and in the answer."""
    return uuid.uuid4().hex[:12]


def file_logger(name: str, path: Path) -> logging.Logger:
    """The logger ``name``, writing to ``path`` only (not propagated to the root logger,
    so nothing reaches the terminal). Idempotent: a second call with the same path adds
    no second handler; another path replaces the handler."""
    logger = logging.getLogger(name)
    target = str(Path(path).resolve())
    with _lock:
        for h in list(logger.handlers):
            if isinstance(h, logging.FileHandler) and h.baseFilename == target:
                break
            logger.removeHandler(h)
            h.close()
        else:
            private_dir(Path(target).parent)
            handler = QuietFileHandler(target)
            handler.setFormatter(Redacting("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


def record_failure(logger: logging.Logger, what: str, exc: BaseException) -> str:
    """Write ``exc`` with its traceback to ``logger`` under a new error id; returns the id."""
    error_id = new_error_id()
    logger.error("error id %s: %s: %s: %s", error_id, what, type(exc).__name__, exc,
                 exc_info=(type(exc), exc, exc.__traceback__))
    for h in logger.handlers:
        h.flush()
    return error_id


class OneLine(logging.Formatter):
    """A log record as one line: no traceback (that goes to the file), only its type and
    first line, and where the details are."""

    def __init__(self, where: str) -> None:
        super().__init__("moirae: %(levelname)s: %(name)s: %(message)s")
        self.where = where

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage().splitlines()[0] if record.getMessage() else ""
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            first = str(exc).splitlines()[0] if str(exc) else ""
            msg += f" ({type(exc).__name__}: {first}; details in {self.where})"
        return redact(f"moirae: {record.levelname.lower()}: {record.name}: {msg}")


def route_logging(path: Path, stream=None) -> None:
    """Send every log record to ``path`` in full (tracebacks included) and warnings and
    errors to ``stream`` (stderr) as one line each, never with a traceback; uncaught
    exceptions in threads are logged the same way. For the CLI's process."""
    import sys

    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_moirae", False):
            root.removeHandler(h)
            h.close()
    private_dir(Path(path).parent)
    to_file = QuietFileHandler(path)
    to_file.setFormatter(Redacting("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    to_file.setLevel(logging.INFO)
    to_term = logging.StreamHandler(stream if stream is not None else sys.stderr)
    to_term.setFormatter(OneLine(str(path)))
    to_term.setLevel(logging.WARNING)
    for h in (to_file, to_term):
        h._moirae = True  # type: ignore[attr-defined]
        root.addHandler(h)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)

    def thread_hook(args) -> None:
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "?"
        logging.getLogger("moirae.thread").error("uncaught exception in thread %s", name,
                                                 exc_info=(args.exc_type, args.exc_value, args.exc_traceback))

    threading.excepthook = thread_hook
