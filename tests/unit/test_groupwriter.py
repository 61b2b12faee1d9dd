"""The host's writer thread: grouped, ordered, each failure told to its caller, and the
event a record's write backs told only after that write's fsync."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import threading
from collections.abc import Callable
from typing import Any

import pytest

from cadre_desktop.errors import StorageError
from cadre_desktop.files.atomicfile import write_json_atomic
from cadre_desktop.files.groupwriter import GroupWriter
from cadre_desktop.host.core.events import EventBus, EventKind, HostEvent
from cadre_desktop.host.core.records import rowstore
from cadre_desktop.host.core.records.lifecycle import Change, Lifecycle
from cadre_desktop.host.core.records.records import NodeRecord, NodeStatus
from cadre_desktop.host.core.records.store import RecordStore
from tests.support.clock import FakeClock

WAIT_S = 10.0


class Gate:
    """A write that holds the writer thread until opened (so what is asked meanwhile piles up)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()

    def write(self) -> None:
        self.entered.set()
        assert self.open.wait(WAIT_S), "the test never opened the gate"


def hold(writer: GroupWriter) -> Gate:
    gate = Gate()
    writer.submit("gate", gate.write)
    assert gate.entered.wait(WAIT_S)
    return gate


def appender(log: list[str], word: str) -> Callable[[], None]:
    return lambda: log.append(word)


def test_writes_piled_up_for_one_file_run_once_with_the_newest():
    writer = GroupWriter()
    ran: list[str] = []
    gate = hold(writer)
    waiters = [writer.submit("records", appender(ran, f"v{i}")) for i in range(5)]
    gate.open.set()
    for waiter in waiters:
        assert waiter.result(WAIT_S) is None
    writer.close()
    assert ran == ["v4"], "five writes of one file asked while the thread was busy are one write, the newest"
    assert writer.writes == 2 and writer.groups == 2


def test_files_are_written_in_the_order_first_asked():
    writer = GroupWriter()
    ran: list[str] = []
    gate = hold(writer)
    done = [writer.submit(key, appender(ran, key)) for key in ("state", "records", "history")]
    done.append(writer.submit("state", appender(ran, "state again")))
    gate.open.set()
    for waiter in done:
        waiter.result(WAIT_S)
    writer.close()
    assert ran == ["state again", "records", "history"]


def test_a_failed_write_is_told_to_each_of_its_callers_and_the_next_write_still_runs():
    writer = GroupWriter()
    ran: list[str] = []

    def full() -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    gate = hold(writer)
    first, second = writer.submit("records", appender(ran, "lost")), writer.submit("records", full)
    after = writer.submit("state", appender(ran, "state"))
    gate.open.set()
    for waiter in (first, second):
        error = waiter.exception(WAIT_S)
        assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    assert after.result(WAIT_S) is None
    with pytest.raises(OSError):
        writer.write_now("records", full)
    writer.close()
    assert ran == ["state"]


def test_a_closed_writer_runs_what_was_queued_and_a_later_write_starts_it_again():
    writer = GroupWriter()
    ran: list[str] = []
    gate = hold(writer)
    queued = writer.submit("records", appender(ran, "queued"))
    gate.open.set()
    writer.close()
    assert queued.done() and ran == ["queued"]
    writer.write_now("records", appender(ran, "later"))
    writer.close()
    assert ran == ["queued", "later"]


def rec(node_id: str = "n1", **kw) -> NodeRecord:
    base: dict[str, Any] = dict(id=node_id, name="Kitchen", status=NodeStatus.UNCLAIMED, created_at="2026-01-01T00:00:00Z")
    base.update(kw)
    return NodeRecord(**base)


def on_disk(store: RecordStore, node_id: str) -> Any:
    return json.loads(store.path.read_text())["nodes"][node_id]


def in_memory(store: RecordStore, node_id: str = "n1") -> NodeRecord:
    record = store.get(node_id)
    assert record is not None
    return record


def grouped_lifecycle(tmp_path) -> tuple[Lifecycle, RecordStore, GroupWriter, list[HostEvent]]:
    store = RecordStore(tmp_path / "hosted-nodes.json")
    store.put(rec(handle="n1.old"))
    writer = GroupWriter()
    store.use_writer(writer)
    events = EventBus()
    seen: list[HostEvent] = []
    events.subscribe(seen.append)
    return Lifecycle(store=store, events=events, clock=FakeClock()), store, writer, seen


async def until(what: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not what():
            await asyncio.sleep(0.005)  # a poll of a condition with a deadline, not a wait for a guessed time


async def test_a_start_is_told_only_after_its_record_is_fsynced(tmp_path, monkeypatch):
    lc, store, writer, seen = grouped_lifecycle(tmp_path)
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        synced.append("fsync")
    monkeypatch.setattr(os, "fsync", fsync)
    told_with: list[tuple[Any, int]] = []
    lc.events.subscribe(lambda event: told_with.append((on_disk(store, "n1"), len(synced))))
    gate = hold(writer)
    after = lc.apply("n1", Change.STARTED, lambda r: r.replace(handle="n1.new"), soon=True)
    assert after is not None and in_memory(store).handle == "n1.new", "memory has the start at once"
    assert seen == [] and on_disk(store, "n1")["handle"] == "n1.old", "told before its write was synced"
    gate.open.set()
    await until(lambda: bool(seen))
    writer.close()
    assert [e.kind for e in seen] == [EventKind.CHANGED]
    row, fsyncs = told_with[0]
    assert row["handle"] == "n1.new" and fsyncs >= 2, "the event came before the file and its folder were synced"


async def test_events_keep_the_order_of_their_transitions_behind_a_pending_write(tmp_path):
    lc, store, writer, seen = grouped_lifecycle(tmp_path)
    gate = hold(writer)
    lc.apply("n1", Change.STARTED, lambda r: r.replace(handle="n1.new"), soon=True)
    lc.apply("n1", Change.EXITED, handle="n1.new", detail="exited with code 1")
    assert seen == [], "an exit was told ahead of the start before it"
    gate.open.set()
    await until(lambda: len(seen) == 3)
    writer.close()
    assert [e.kind for e in seen] == [EventKind.CHANGED, EventKind.CHANGED, EventKind.EXITED]


async def test_a_write_that_backs_an_answer_is_waited_for_and_its_failure_raised(tmp_path, monkeypatch):
    lc, store, writer, seen = grouped_lifecycle(tmp_path)

    def full(path, doc, **kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(rowstore, "write_json_atomic", full)
    with pytest.raises(StorageError, match="No space left"):
        lc.apply("n1", Change.PAUSE, lambda r: r.replace(status=NodeStatus.PAUSED))
    assert in_memory(store).status is NodeStatus.UNCLAIMED and seen == [], "a failed answer's write changed memory"
    writer.close()


async def test_a_failed_grouped_write_is_told_kept_unsaved_and_written_again(tmp_path, monkeypatch):
    lc, store, writer, seen = grouped_lifecycle(tmp_path)
    monkeypatch.setattr(rowstore, "RESAVE_S", 0.01)
    full = threading.Event()
    full.set()
    real = write_json_atomic

    def write(path, doc, **kw):
        if full.is_set():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, doc, **kw)
    monkeypatch.setattr(rowstore, "write_json_atomic", write)
    errors: list[StorageError | None] = []
    store.put_soon(rec(handle="n1.new"), errors.append)
    await until(lambda: bool(errors))
    assert isinstance(errors[0], StorageError) and "No space left" in errors[0].message
    assert store.unsaved == {"n1"} and "No space left" in (store.save_error or "")
    assert in_memory(store).handle == "n1.new" and on_disk(store, "n1")["handle"] == "n1.old"
    full.clear()
    await until(lambda: not store.unsaved)
    writer.close()
    assert on_disk(store, "n1")["handle"] == "n1.new" and store.save_error is None


async def test_a_start_that_answers_someone_is_on_disk_and_told_when_apply_returns(tmp_path):
    """A Retry's start: the person's answer shows the new decision at once (tests/ui/test_window.py)."""
    lc, store, writer, seen = grouped_lifecycle(tmp_path)
    lc.apply("n1", Change.STARTED, lambda r: r.replace(handle="n1.new"))
    assert on_disk(store, "n1")["handle"] == "n1.new" and [e.kind for e in seen] == [EventKind.CHANGED]
    writer.close()


async def test_a_view_asked_while_a_start_is_written_waits_for_its_sync(tmp_path):
    """A view shows a respawned child only once its record is synced, or its save error known."""
    lc, store, writer, seen = grouped_lifecycle(tmp_path)
    gate = hold(writer)
    lc.apply("n1", Change.STARTED, lambda r: r.replace(handle="n1.new"), soon=True)
    waiting = asyncio.ensure_future(store.settled())
    await asyncio.sleep(0)
    assert not waiting.done(), "settled before the start's write"
    gate.open.set()
    async with asyncio.timeout(WAIT_S):
        await waiting
    assert on_disk(store, "n1")["handle"] == "n1.new"
    writer.close()


def test_a_store_whose_upgrade_is_not_saved_yet_takes_no_grouped_write(tmp_path):
    """The first write after an upgrade keeps the old file's backup first: it is waited for."""
    store = RecordStore(tmp_path / "hosted-nodes.json")
    store.use_writer(GroupWriter())
    assert store.grouped
    store._upgraded_from = 1
    assert not store.grouped
    with pytest.raises(RuntimeError):
        store.put_soon(rec(), lambda error: None)
