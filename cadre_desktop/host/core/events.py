"""Small typed events the engine emits; the UI and the control API re-read state on them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

log = logging.getLogger(__name__)


class EventKind(str, Enum):
    ADDED = "added"
    CHANGED = "changed"
    REMOVED = "removed"
    #: The host gave up on a node (also sent as CHANGED); the UI notifies on this one.
    GAVE_UP = "gave_up"
    #: A node's child ended on its own (detail: "exited with code 3: <its last log line>").
    EXITED = "exited"
    #: A node reported it was claimed or joined a cadre.
    CLAIMED = "claimed"
    #: A node was put on hold: paused, sleeping or done (detail: why). No notification.
    HELD = "held"
    #: A held node was started again (detail: "wake", "resume" or "retry").
    RESUMED = "resumed"
    #: A failover node was taken over by this computer from one that lost its lease (detail: the
    #: sentence a person is told once, "Study moved to nas: laptop's lease expired"). Not an alarm.
    FAILED_OVER = "failed_over"
    #: A node moved here from another computer by a planned move (detail: words). No notification.
    MOVED = "moved"
    #: The machine woke from sleep (node_id is empty; detail is the seconds slept).
    WOKE = "woke"
    #: The address nodes advertise changed (node_id empty; detail is the new address).
    ADDRESS = "address"
    #: Lending: node_id is the grant's or the donation's id.
    GRANT_ADDED = "grant_added"
    GRANT_CHANGED = "grant_changed"
    DONATION_ADDED = "donation_added"
    DONATION_CHANGED = "donation_changed"
    DONATION_REMOVED = "donation_removed"
    #: The host gave up on a donated node (also sent as DONATION_CHANGED); detail is why.
    DONATION_GAVE_UP = "donation_gave_up"


#: The lending events: their id names a grant or a donation, never a hosted node.
LENDING_EVENTS = frozenset({
    EventKind.GRANT_ADDED, EventKind.GRANT_CHANGED, EventKind.DONATION_ADDED,
    EventKind.DONATION_CHANGED, EventKind.DONATION_REMOVED, EventKind.DONATION_GAVE_UP,
})


@dataclass(frozen=True)
class HostEvent:
    kind: EventKind
    node_id: str
    #: Words for a person, for notifications (the give-up reason, the cadre name).
    detail: str = ""


T = TypeVar("T")


class Listeners(Generic[T]):
    """Who wants to hear of something, in the order they asked. One listener that raises
    is logged and the others still hear: a broken subscriber must not stop the engine."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._listeners: list[Callable[[T], None]] = []

    def add(self, listener: Callable[[T], None]) -> Callable[[], None]:
        """Start telling `listener`; the function returned stops it (twice is harmless)."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)
        return remove

    def tell(self, item: T) -> None:
        for listener in list(self._listeners):
            try:
                listener(item)
            except Exception:  # a broken listener must not keep the news from the others
                log.exception("%s listener failed on %s", self.what, item)

    def clear(self) -> None:
        self._listeners.clear()


Listener = Callable[[HostEvent], None]


class EventBus:
    def __init__(self) -> None:
        self._listeners: Listeners[HostEvent] = Listeners("event")

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        return self._listeners.add(listener)

    def emit(self, kind: EventKind, node_id: str, detail: str = "") -> None:
        self._listeners.tell(HostEvent(kind, node_id, detail))
