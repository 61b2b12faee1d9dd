"""Handing a notice to the desktop: the platform's notification service, else Qt's tray balloon.

The service is reached through desktop-notifier, on the app's one asyncio loop:
org.freedesktop.Notifications over D-Bus on Linux (under any tray, XEmbed or
StatusNotifierItem), the user notification centre on macOS, toasts on Windows.
A notice there carries buttons and a default action (clicking the notice).
Qt's balloon is the fallback where no service answers (no D-Bus session, an
unbundled app on macOS): it has no buttons, and clicking it is the default action.

One live notice per key: sending a key again replaces its notice, `withdraw`
takes it away. On D-Bus a notice stays live until the service says it closed
(`NotificationClosed`) or we close it: a click or a button leaves it on screen
(dunst keeps a critical one), and desktop-notifier forgets a notice at its first
action, so its clicks and buttons would die after one and it could no longer be
closed. There the app hears `ActionInvoked` and `NotificationClosed` itself, by the
service's own id, kept here; desktop-notifier only sends and closes. Elsewhere
(macOS, Windows: a click takes the notice away) desktop-notifier's callbacks answer.
A critical notice carries the alert icon, not the app's. Every call to the service
is bounded, and its work runs one at a time, so a withdraw never overtakes the send
it withdraws.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QSystemTrayIcon

log = logging.getLogger(__name__)

#: The action id of clicking the notice itself.
DEFAULT = "default"
SERVICE_TIMEOUT_S = 5.0
BALLOON_MS = 15_000


@dataclass(frozen=True)
class Notice:
    key: str
    node_id: str
    title: str
    body: str
    critical: bool = False
    #: Buttons besides the default action: (action id, label).
    actions: tuple[tuple[str, str], ...] = ()
    #: The body for a balloon, which has no buttons (defaults to `body`).
    balloon_body: str = ""


def _desktop_notifier(app_icon: Path):
    from desktop_notifier import DesktopNotifier, Icon

    return DesktopNotifier(app_name="cadre-desktop", app_icon=Icon(path=app_icon))


class Delivery(QObject):
    #: The person picked an action on a notice: its key, the action id (DEFAULT for the notice itself).
    acted = Signal(str, str)
    #: A notice went out: its key, and "service" or "balloon" (or "" when nothing could show it).
    delivered = Signal(str, str)

    def __init__(self, tray: QSystemTrayIcon | None, app_icon: Path,
                 make_notifier: Callable[[Path], object] = _desktop_notifier, parent: QObject | None = None,
                 alert_icon: Path | None = None) -> None:
        super().__init__(parent)
        self.tray, self.app_icon, self._make = tray, app_icon, make_notifier
        self.alert_icon = alert_icon
        self._notifier: Any = None
        self._live: dict[str, str] = {}
        self._platform_ids: dict[str, int] = {}
        self._watched: Any = None  # the D-Bus interface whose signals we hear ourselves
        self._balloon_key = ""
        self._lock = asyncio.Lock()
        if tray is not None:
            tray.messageClicked.connect(self._balloon_clicked)

    # -- the service ---------------------------------------------------------------------

    async def _service(self):
        """The notifier when a service answers now, else None (asked again each time: one may appear)."""
        from desktop_notifier import Capability

        try:
            if self._notifier is None:
                self._notifier = self._make(self.app_icon)
            async with asyncio.timeout(SERVICE_TIMEOUT_S):
                caps = await self._notifier.get_capabilities()
        except Exception as exc:  # no session bus, no service, a service that hangs
            log.info("no notification service (%s); using the tray's balloon", exc or type(exc).__name__)
            self.close()  # the next try makes a new connection: this one must not stay open beside it
            return None
        self._watch(self._notifier)
        return self._notifier if Capability.TITLE in caps else None

    def _watch(self, notifier) -> None:
        """Hear the D-Bus service's answers ourselves, once per connection (desktop-notifier
        answers a notice's first action only)."""
        interface = getattr(getattr(notifier, "_backend", None), "interface", None)
        if interface is None or interface is self._watched or not hasattr(interface, "on_action_invoked"):
            return
        interface.on_action_invoked(self._on_bus_action)
        if hasattr(interface, "on_notification_closed"):
            interface.on_notification_closed(self._on_bus_closed)
        self._watched = interface

    async def _send_service(self, notifier, notice: Notice) -> bool:
        from desktop_notifier import Button, Icon, Notification, Urgency

        sent: list[bool] = []
        ours = self._watched is not None  # D-Bus: its answers heard by _on_bus_action, not callbacks
        buttons = tuple(Button(title=label, identifier=action,
                               on_pressed=None if ours else functools.partial(self._act, notice.key, action))
                        for action, label in notice.actions)
        note = Notification(
            title=notice.title, message=notice.body, buttons=buttons,
            urgency=Urgency.Critical if notice.critical else Urgency.Normal,
            icon=Icon(path=self.alert_icon) if notice.critical and self.alert_icon else None,
            on_clicked=None if ours else (lambda: self._act(notice.key, DEFAULT)),
            on_dismissed=None if ours else (lambda: self._forget(notice.key)),
            on_dispatched=lambda: sent.append(True),
        )
        try:
            async with asyncio.timeout(SERVICE_TIMEOUT_S):
                identifier = await notifier.send_notification(note)
        except Exception as exc:  # a D-Bus service can fail in any way; the tray's balloon is the fallback
            log.warning("the notification service did not take the notice: %s", exc or type(exc).__name__)
            return False
        if sent:  # desktop-notifier logs and swallows a failed send; dispatched means it arrived
            self._live[notice.key] = identifier
            platform_id = _platform_id(notifier, identifier)
            if platform_id is not None:
                self._platform_ids[notice.key] = platform_id
        return bool(sent)

    # -- what the Notifier calls ------------------------------------------------------------

    async def send(self, notice: Notice) -> str:
        async with self._lock:
            await self._withdraw(notice.key)
            notifier = await self._service()
            if notifier is not None and await self._send_service(notifier, notice):
                via = "service"
            else:
                via = self._balloon(notice)
        self.delivered.emit(notice.key, via)
        return via

    async def withdraw(self, key: str) -> None:
        async with self._lock:
            await self._withdraw(key)

    async def withdraw_all(self) -> None:
        async with self._lock:
            for key in {*self._live, *self._platform_ids}:
                await self._withdraw(key)

    def close(self) -> None:
        """Close the service's connection (desktop-notifier keeps its bus open otherwise);
        a later notice opens a new one."""
        bus = getattr(getattr(self._notifier, "_backend", None), "bus", None)
        self._notifier = self._watched = None
        if bus is not None:
            try:
                bus.disconnect()
            except Exception as exc:  # closing at quit must finish whatever the bus does
                log.debug("closing the notification bus: %r", exc)

    async def _withdraw(self, key: str) -> None:
        identifier = self._live.pop(key, None)
        platform_id = self._platform_ids.pop(key, None)
        if self._balloon_key == key:
            self._balloon_key = ""
        if (identifier is None and platform_id is None) or self._notifier is None:
            return
        try:
            async with asyncio.timeout(SERVICE_TIMEOUT_S):
                if identifier is not None and (platform_id is None or _platform_id(self._notifier, identifier)):
                    await self._notifier.clear(identifier)
                elif platform_id is not None:
                    await _close_by_platform_id(self._notifier, platform_id)  # acted on: forgotten there
        except Exception as exc:  # the service closed it already (a click, a dismiss)
            log.debug("withdrawing notice %s: %r", key, exc)

    # -- the balloon ---------------------------------------------------------------------------

    def _balloon(self, notice: Notice) -> str:
        tray = self.tray
        if tray is None or not tray.isVisible() or not QSystemTrayIcon.supportsMessages():
            return ""
        icon = QSystemTrayIcon.MessageIcon.Critical if notice.critical else QSystemTrayIcon.MessageIcon.Information
        tray.showMessage(notice.title, notice.balloon_body or notice.body, icon, BALLOON_MS)
        self._balloon_key = notice.key
        return "balloon"

    def _balloon_clicked(self) -> None:
        if self._balloon_key:
            self._act(self._balloon_key, DEFAULT)

    # -- answers ---------------------------------------------------------------------------------

    def _act(self, key: str, action: str) -> None:
        if action == DEFAULT:
            self._forget(key)  # clicked: the service closes it
        self.acted.emit(key, action)  # a button (Retry): it may stay on screen until withdrawn

    def _forget(self, key: str) -> None:
        self._live.pop(key, None)
        self._platform_ids.pop(key, None)

    def _key_of(self, platform_id: int) -> str | None:
        return next((k for k, p in self._platform_ids.items() if p == platform_id), None)

    def _on_bus_action(self, platform_id: int, action: str) -> None:
        """`ActionInvoked`: a click or a button, as often as the person presses; the notice
        stays live (the service says when it closes it)."""
        key = self._key_of(platform_id)
        if key is not None:
            self.acted.emit(key, action)

    def _on_bus_closed(self, platform_id: int, reason: int) -> None:
        """`NotificationClosed`: gone from the screen (dismissed, expired, or closed by us)."""
        key = self._key_of(platform_id)
        if key is not None:
            self._forget(key)


def _platform_id(notifier, identifier: str) -> int | None:
    """The service's own id of a notice desktop-notifier still knows (None where it has none:
    not D-Bus, or forgotten once acted on)."""
    ids = getattr(getattr(notifier, "_backend", None), "_platform_to_interface_notification_identifier", None)
    inverse = getattr(ids, "inverse", None)
    return inverse.get(identifier) if inverse is not None else None


async def _close_by_platform_id(notifier, platform_id: int) -> None:
    """org.freedesktop.Notifications.CloseNotification, for a notice desktop-notifier forgot."""
    interface = getattr(getattr(notifier, "_backend", None), "interface", None)
    if interface is not None:
        await interface.call_close_notification(platform_id)
