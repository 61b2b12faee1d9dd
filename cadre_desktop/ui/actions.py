"""What a person asks of the host, as tasks on the loop that report back in one way.

Each action runs a Host coroutine as an asyncio task (kept referenced until it
ends); a failure goes to `show_error`, a success to an optional callback. While
an action on a node is in flight the node is `busy` (its buttons wait), and it
is `quiet`: the notifier says nothing about what the person just asked for.

While the engine starts (the tray app shows its icon first), an action waits for it:
`engine_up` lets what was asked meanwhile run, in the order it was asked.

An action on a node of another computer of the fleet goes over the link; one whose computer
cannot be reached is not done, and says so ("Not done: nas cannot be reached (since 14:05).").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

from cadre_desktop.errors import NoSuchThing
from cadre_desktop.host.fleet.peers import LinkDown
from cadre_desktop.ui.errors import show_error
from cadre_desktop.ui.nodes.computers import Group, away_words
from cadre_desktop.ui.tray.status import utcnow


class Actions(QObject):
    #: A node's busy state changed (or "" for a host-wide action).
    busy_changed = Signal(str)
    #: A node was added (or joined) through the UI: its id.
    added = Signal(str)

    def __init__(self, host, parent_widget: Callable[[], QWidget | None] = lambda: None,
                 parent: QObject | None = None, *, engine_up: bool = True) -> None:
        super().__init__(parent)
        self.host = host
        #: Set once the host has started; until then every action waits for it.
        self._up = asyncio.Event()
        if engine_up:
            self._up.set()
        self._parent_widget = parent_widget
        self._tasks: set[asyncio.Task] = set()
        self._busy: dict[str, int] = {}
        self._closed = False
        #: The computer of a node as the window shows it (its state: online, asleep, unreachable); the shell's model.
        self.where: Callable[[str], Group | None] = lambda _node_id: None

    # -- running ------------------------------------------------------------------

    def run(self, doing: str, work: Awaitable[Any], node_id: str = "",
            done: Callable[[Any], None] | None = None) -> asyncio.Task:
        task = asyncio.ensure_future(work if self._up.is_set() else self._when_up(work))
        self._tasks.add(task)
        self._busy[node_id] = self._busy.get(node_id, 0) + 1
        self.busy_changed.emit(node_id)
        task.add_done_callback(lambda t: self._finished(t, doing, node_id, done))
        return task

    def _finished(self, task: asyncio.Task, doing: str, node_id: str, done) -> None:
        self._tasks.discard(task)
        self._busy[node_id] -= 1
        if not self._busy[node_id]:
            del self._busy[node_id]
        if self._closed:  # what it would report to may be deleted already
            return
        self.busy_changed.emit(node_id)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            show_error(self._parent_widget(), error, doing)
        elif done is not None:
            done(task.result())

    def engine_up(self) -> None:
        """The host has started: what waited for it runs now."""
        self._up.set()

    async def _when_up(self, work: Awaitable[Any]) -> Any:
        try:
            await self._up.wait()
        except asyncio.CancelledError:
            if asyncio.iscoroutine(work):
                work.close()  # never run: closed, not left to warn that it was never awaited
            raise
        return await work

    def busy(self, node_id: str) -> bool:
        return node_id in self._busy

    def close(self) -> None:
        """Stop reporting: what is still in flight is cancelled and ends in silence."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()

    async def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- the actions -------------------------------------------------------------------

    def _name(self, node_id: str) -> str:
        try:
            return self.host.get_node(node_id).name
        except NoSuchThing:  # removed meanwhile: its id is all there is to name it by
            return node_id

    def _on(self, node_id: str, action: str) -> Awaitable[Any]:
        """A node action on this host, or on the computer of the fleet that hosts the node (over the link)."""
        fleet = getattr(self.host, "fleet", None)
        if fleet is not None and fleet.is_remote(node_id):
            return self._over_the_link(fleet, node_id, action)
        return getattr(self.host, f"{action}_node")(node_id)

    async def _over_the_link(self, fleet, node_id: str, action: str) -> Any:
        """Refused at once, in words, when the node's computer is known not to answer; the same words
        when the link fails on the way (the action is not known done)."""
        group = self.where(node_id)
        if group is not None and group.away and group.since:  # known not to answer (not merely not asked yet)
            raise LinkDown(away_words(group, utcnow()))
        try:
            return await fleet.act(node_id, action)
        except LinkDown:
            if group is None:
                raise
            now = utcnow()
            raise LinkDown(away_words(replace(group, state="unreachable", since=group.since or now.isoformat()), now)) from None

    def add(self, name: str | None = None) -> asyncio.Task:
        return self.run("add a node", self.host.add_node(name), done=lambda v: self.added.emit(v.id))

    def join(self, invitation: str, name: str | None = None) -> asyncio.Task:
        return self.run("join with the invitation", self.host.join_node(invitation, name),
                        done=lambda v: self.added.emit(v.id))

    def invite(self, node_id: str, name: str | None = None) -> asyncio.Task:
        return self.run(f"add another node to the cadre of {self._name(node_id)}",
                        self.host.invite_node(node_id, name), done=lambda v: self.added.emit(v.id))

    def retry(self, node_id: str) -> asyncio.Task:
        return self.run(f"retry {self._name(node_id)}", self._on(node_id, 'retry'), node_id)

    def pause(self, node_id: str) -> asyncio.Task:
        return self.run(f"pause {self._name(node_id)}", self._on(node_id, 'pause'), node_id)

    def resume(self, node_id: str) -> asyncio.Task:
        return self.run(f"resume {self._name(node_id)}", self._on(node_id, 'resume'), node_id)

    def pause_all(self, body: dict, done: Callable[[Any], None] | None = None) -> asyncio.Task:
        """Pause all: `body` is {} (until resumed), {"for_ms": N} or {"until": aware datetime}."""
        return self.run("pause every node", self.host.pause_all(**body), done=done)

    def resume_all(self, done: Callable[[Any], None] | None = None) -> asyncio.Task:
        return self.run("resume every node", self.host.resume_all(), done=done)

    def restart(self, node_id: str) -> asyncio.Task:
        return self.run(f"restart {self._name(node_id)}", self._on(node_id, 'restart'), node_id)

    def regenerate(self, node_id: str) -> asyncio.Task:
        return self.run(f"make a new claim code for {self._name(node_id)}",
                        self.host.regenerate_node(node_id), node_id)

    def move(self, node_id: str, to: str) -> asyncio.Task:
        """Move the node to computer `to` (host/fleetrun: here, or on the computer that hosts it)."""
        return self.run(f"move {self._name(node_id)}", self.host.fleetrun.move(node_id, to), node_id)

    def remove(self, node_id: str) -> asyncio.Task:
        return self.run(f"remove {self._name(node_id)}", self._on(node_id, 'remove'), node_id)
