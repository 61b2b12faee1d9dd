"""Desktop notifications: decide what matters before saying anything.

Two things are worth interrupting a person for: the host gave up on a node
(once per give-up, however often the engine repeats itself, until the node
leaves `error`), and a node was claimed. Nothing about a node whose action the
person started and is still running (a Remove, a Restart), nothing once Quit
began, nothing of a kind the settings turn off.

A give-up is critical, says the node's own last words (its last stderr line),
and carries *Retry*; clicking it opens the window on the node. A node that
recovers, or is removed, withdraws its notice: nothing stale stays on screen.

After a wake from sleep, give-ups are held for a settle period (nodes that
died while the machine slept are being respawned meanwhile) and then said in
one notification, so a wake never produces a burst.
"""

from __future__ import annotations

import asyncio
import logging

from PySide6.QtCore import QObject, QTimer, Signal

from cadre_desktop.errors import NoSuchThing
from cadre_desktop.settings import Settings
from cadre_desktop.ui.actions import Actions
from cadre_desktop.ui.bridge import HostBridge
from cadre_desktop.ui.lending.lent_core import lent_notice_view
from cadre_desktop.ui.tray.delivery import DEFAULT, Delivery, Notice
from cadre_desktop.ui.tray.status import exit_line, gave_up

log = logging.getLogger(__name__)

SETTLE_MS = 15_000
RETRY = "retry"
GAVE_UP, CLAIMED, BATCH = "gave_up", "claimed", "gave_up:several"
FAILED_OVER = "failed_over"
CLOSE_TIMEOUT_S = 3.0


def key_of(kind: str, node_id: str) -> str:
    return f"{kind}:{node_id}"


class Notifier(QObject):
    #: Every notification decided on: node id, title, body.
    shown = Signal(str, str, str)
    #: The person clicked a notification about this node.
    open_node = Signal(str)
    #: ... about a node lent to another cadre.
    open_lent = Signal()

    def __init__(self, host, bridge: HostBridge, actions: Actions, delivery: Delivery,
                 settings: Settings, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host, self.actions, self.delivery = host, actions, delivery
        self.settings = settings
        self.muted = False
        self._given_up: set[str] = set()
        self._held: list[tuple[str, str]] = []
        self._tasks: set[asyncio.Task] = set()
        self._settle = QTimer(self)
        self._settle.setSingleShot(True)
        self._settle.setInterval(SETTLE_MS)
        self._settle.timeout.connect(self._flush_held)
        bridge.woke.connect(self._on_woke)
        bridge.gave_up.connect(self._on_gave_up)
        bridge.donation_gave_up.connect(self._on_gave_up)  # a lent node: told like a hosted one
        bridge.happened.connect(self._on_lending)
        bridge.claimed.connect(self._on_claimed)
        bridge.failed_over.connect(self._on_failed_over)
        bridge.changed.connect(self._on_changed)
        bridge.removed.connect(self._on_removed)
        delivery.acted.connect(self._on_acted)

    @property
    def enabled(self) -> bool:
        return self.settings.notifications

    def apply(self, settings: Settings) -> None:
        self.settings = settings

    def mute(self) -> None:
        """From Quit on: stopping nodes is what the person asked for."""
        self.muted = True

    def stop(self) -> None:
        """When the Shell closes: nothing more is said, and what is on its way is called off
        (it would reach Qt objects that are gone)."""
        self.muted = True
        for task in list(self._tasks):
            task.cancel()

    async def close(self) -> None:
        """Take our notices off the screen: their buttons die with the app."""
        self.muted = True
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self.delivery.withdraw_all()
        except Exception as exc:  # quitting must finish whatever the notification service does
            log.debug("withdrawing notices at quit: %r", exc)

    # -- engine events ---------------------------------------------------------------------

    def _view(self, node_id: str):
        try:
            return self.host.get_node(node_id)
        except NoSuchThing:  # not a hosted node: a lent one, or gone
            return lent_notice_view(self.host, node_id)

    def _on_lending(self, kind: str, node_id: str) -> None:
        """A lent node that left `error` (a Retry) or is gone withdraws its notice."""
        if kind in ("donation_changed", "donation_removed"):
            view = lent_notice_view(self.host, node_id)
            if view is None or not gave_up(view):
                self._recovered(node_id)

    def _on_changed(self, node_id: str) -> None:
        view = self._view(node_id)
        if view is None or not gave_up(view):
            self._recovered(node_id)

    def _on_removed(self, node_id: str) -> None:
        self._recovered(node_id)
        self._run(self.delivery.withdraw(key_of(CLAIMED, node_id)))

    def _recovered(self, node_id: str) -> None:
        if node_id in self._given_up:
            self._given_up.discard(node_id)
            self._run(self.delivery.withdraw(key_of(GAVE_UP, node_id)))

    def _on_woke(self, slept_s: float) -> None:
        self._settle.start()  # (re)start the settle period

    def _flush_held(self) -> None:
        held = [(n, r) for n, r in self._held if n in self._given_up]
        self._held.clear()
        if len(held) == 1:
            self._say_gave_up(*held[0])
        elif held:
            names = [v.name for n, _ in held if (v := self._view(n)) is not None]
            if names:
                self._notify(GAVE_UP, Notice(
                    BATCH, held[0][0], f"{len(names)} nodes stopped",
                    f"{', '.join(names)}\nOpen cadre-desktop to retry them.", critical=True))

    def _on_gave_up(self, node_id: str, reason: str) -> None:
        if node_id in self._given_up:
            return
        self._given_up.add(node_id)
        if self._settle.isActive():
            self._held.append((node_id, reason))
            return
        self._say_gave_up(node_id, reason)

    def _say_gave_up(self, node_id: str, reason: str) -> None:
        view = self._view(node_id)
        if view is None:
            return
        words = exit_line(view, reason) or "It kept stopping."
        self._notify(GAVE_UP, Notice(
            key_of(GAVE_UP, node_id), node_id, f"{view.name} stopped", words, critical=True,
            actions=((RETRY, "Retry"),), balloon_body=f"{words}\nOpen cadre-desktop to retry it."))

    def remote_gave_up(self, view, computer: str) -> None:
        """Another computer's node given up on, told by this tray for the whole fleet (the model decides
        which tray: `Fleet.notifies_for`)."""
        if view.id in self._given_up:
            return
        self._given_up.add(view.id)
        words = exit_line(view, view.last_error or "") or "It kept stopping."
        self._notify(GAVE_UP, Notice(key_of(GAVE_UP, view.id), view.id, f"{view.name} stopped on {computer}", words,
                                     critical=True, balloon_body=f"{words}\nOpen cadre-desktop to retry it."))

    def remote_recovered(self, node_id: str) -> None:
        self._recovered(node_id)

    def _on_claimed(self, node_id: str, cadre: str) -> None:
        view = self._view(node_id)
        if view is None:
            return
        title = f"{view.name} was claimed" if view.mode == "claim" else f"{view.name} joined its cadre"
        body = f"It joined the cadre {cadre}." if cadre else "It joined its cadre."
        self._notify(CLAIMED, Notice(key_of(CLAIMED, node_id), node_id, title, body))

    def _on_failed_over(self, node_id: str, words: str) -> None:
        """A failover node taken over by this computer: told once, not an alarm."""
        view = self._view(node_id)
        title = f"{view.name} moved" if view is not None else "A node moved"
        self._notify(FAILED_OVER, Notice(key_of(FAILED_OVER, node_id), node_id, title, words or title))

    # -- saying it -----------------------------------------------------------------------------

    def _wanted(self, kind: str) -> bool:
        s = self.settings
        return s.notifications and (s.notify_gave_up if kind == GAVE_UP else s.notify_claimed)

    def _notify(self, kind: str, notice: Notice) -> None:
        if not self._wanted(kind) or self.muted or self.actions.busy(notice.node_id):
            return
        log.info("notification: %s", notice.title)
        self.shown.emit(notice.node_id, notice.title, notice.body)
        self._run(self.delivery.send(notice))

    def _run(self, work) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- answers -------------------------------------------------------------------------------

    def _on_acted(self, key: str, action: str) -> None:
        kind, _, node_id = key.partition(":")
        if key == BATCH:
            node_id = next(iter(sorted(self._given_up)), "")
        view = self._view(node_id) if node_id else None
        if view is None:
            return
        lent = getattr(view, "lent", False)
        if action == RETRY and kind == GAVE_UP:
            if gave_up(view) and not self.actions.busy(node_id):
                if lent:
                    self.actions.run(f"retry {view.name.lower()}", self.host.lending.retry(node_id), node_id)
                else:
                    self.actions.retry(node_id)
            return
        if action == DEFAULT:
            self.open_lent.emit() if lent else self.open_node.emit(node_id)
