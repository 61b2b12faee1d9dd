"""The one adapter from engine events to Qt signals.

The Host emits small `HostEvent`s on the asyncio loop (which, under qasync, is
the Qt main thread); this object re-emits each as a Qt signal, so views connect
to signals and never subscribe to the engine themselves.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from cadre_desktop.host.core.events import EventKind, HostEvent


class HostBridge(QObject):
    added = Signal(str)
    changed = Signal(str)
    removed = Signal(str)
    #: node id, the reason in words
    gave_up = Signal(str, str)
    #: a lent node's id, the reason in words
    donation_gave_up = Signal(str, str)
    #: node id, the cadre it joined
    claimed = Signal(str, str)
    #: node id, the sentence told once ("Study moved to nas: laptop's lease expired")
    failed_over = Signal(str, str)
    #: the machine woke from sleep: seconds it slept
    woke = Signal(float)
    #: after any event, these and host-wide ones (a wake from sleep, a new address): (kind, node id)
    happened = Signal(str, str)

    def __init__(self, host, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self._per_node = {EventKind.ADDED: self.added, EventKind.CHANGED: self.changed,
                          EventKind.REMOVED: self.removed}
        self._unsubscribe = host.subscribe(self._on_event)

    def _on_event(self, event: HostEvent) -> None:
        kind = event.kind
        if kind is EventKind.GAVE_UP:
            self.gave_up.emit(event.node_id, event.detail)
        elif kind is EventKind.DONATION_GAVE_UP:
            self.donation_gave_up.emit(event.node_id, event.detail)
        elif kind is EventKind.CLAIMED:
            self.claimed.emit(event.node_id, event.detail)
        elif kind is EventKind.FAILED_OVER:
            self.failed_over.emit(event.node_id, event.detail)
        elif kind is EventKind.WOKE:
            self.woke.emit(float(event.detail or 0))
        elif kind in self._per_node:
            self._per_node[kind].emit(event.node_id)
        self.happened.emit(kind.value, event.node_id)

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
