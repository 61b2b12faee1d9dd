"""The host's logging on a disk that refuses writes: records are lost quietly, with a bounded note."""

from __future__ import annotations

import errno
import logging

from cadre_desktop.logs import logsetup
from cadre_desktop.logs.logsetup import PrivateRotatingFileHandler


def test_a_log_that_cannot_be_written_is_one_short_note_never_a_traceback_per_record(tmp_path, capsys,
                                                                                      monkeypatch):
    monkeypatch.setattr(logging, "raiseExceptions", True)  # as Python starts; setup_logging turns it off
    handler = PrivateRotatingFileHandler(tmp_path / "host.log", maxBytes=1 << 20, backupCount=1)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(handler.stream, "write", full)
    logger = logging.getLogger("test.full.disk")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        for i in range(200):
            logger.error("line %d", i)
    finally:
        logger.removeHandler(handler)
        handler.close()
    err = capsys.readouterr().err
    assert "Logging error" not in err and "Traceback" not in err, err[:500]
    notes = [line for line in err.splitlines() if "cannot write the host log" in line]
    assert len(notes) == 1 and "No space left on device" in notes[0], err[:500]
    assert handler.lost == 199  # the 199 after the note, said at the next one


def test_the_hosts_logging_never_raises_on_a_record(tmp_path, monkeypatch):
    monkeypatch.setattr(logging, "raiseExceptions", True)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.delattr(root, "_cadre_configured", raising=False)
    paths = type("P", (), {"log_dir": tmp_path / "logs", "host_log": tmp_path / "logs" / "host.log"})()
    try:
        logsetup.setup_logging(paths, to_stderr=False)
        assert logging.raiseExceptions is False
    finally:
        for handler in root.handlers:
            handler.close()
        if hasattr(root, "_cadre_configured"):
            del root._cadre_configured
