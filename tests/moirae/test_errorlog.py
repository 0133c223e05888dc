"""Failures go to log files, the terminal gets one line each."""

from __future__ import annotations

import io
import logging
import threading

from moirae.runtime.errorlog import QuietFileHandler, file_logger, record_failure, route_logging


def test_library_and_thread_errors_are_one_line_on_the_terminal_and_whole_in_the_file(tmp_path):
    term = io.StringIO()
    log = tmp_path / "logs" / "cli.log"
    old_hook, root = threading.excepthook, logging.getLogger()
    before = list(root.handlers)
    try:
        route_logging(log, term)
        try:
            {}["missing"]
        except KeyError:
            logging.getLogger("moirae.somewhere").exception("recall failed\nsecond line")
        t = threading.Thread(target=lambda: 1 / 0, name="worker-7")
        t.start()
        t.join()
        logging.getLogger("moirae.somewhere").info("only in the file")
    finally:
        for h in root.handlers[:]:
            if h not in before:
                root.removeHandler(h)
                h.close()
        threading.excepthook = old_hook
    lines = term.getvalue().splitlines()
    assert lines == [
        f"moirae: error: moirae.somewhere: recall failed (KeyError: 'missing'; details in {log})",
        "moirae: error: moirae.thread: uncaught exception in thread worker-7 "
        f"(ZeroDivisionError: division by zero; details in {log})",
    ]
    text = log.read_text()
    assert text.count("Traceback") == 2 and "only in the file" in text and "second line" in text


def test_record_failure_names_an_id_the_file_holds(tmp_path):
    logger = file_logger("moirae.test.errors", tmp_path / "api.log")
    try:
        raise RuntimeError("db gone")
    except RuntimeError as exc:
        error_id = record_failure(logger, "GET /x", exc)
    text = (tmp_path / "api.log").read_text()
    assert f"error id {error_id}: GET /x: RuntimeError: db gone" in text and "Traceback" in text
    assert file_logger("moirae.test.errors", tmp_path / "api.log").handlers == logger.handlers  # idempotent


def test_an_unwritable_log_file_is_said_once_in_one_line_and_logging_resumes(tmp_path, capsys):
    # /dev/full fails every write with ENOSPC, as a file on a full disk does
    handler = QuietFileHandler("/dev/full")
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("moirae.test.fulldisk")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        for i in range(5):
            logger.warning("record %d", i)
        err = capsys.readouterr().err
        assert err.splitlines() == ["moirae: cannot write the log file /dev/full: No space left on device; "
                                    "its records are lost until it can be written"]
        assert handler.failing and handler.lost == 5
        handler.baseFilename = str(tmp_path / "engine.log")  # space returns (the file can be written)
        logger.warning("after")
        assert capsys.readouterr().err.splitlines() == [
            f"moirae: the log file {tmp_path / 'engine.log'} is writable again (5 record(s) were lost)"]
        handler.flush()
        assert (tmp_path / "engine.log").read_text() == "after\n"
    finally:
        logger.removeHandler(handler)
        handler.close()
