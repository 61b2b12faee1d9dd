"""Small typed events the engine emits; the UI and the control API re-read state on them."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Callable

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


Listener = Callable[[HostEvent], None]


class EventBus:
    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)
        return unsubscribe

    def emit(self, kind: EventKind, node_id: str, detail: str = "") -> None:
        event = HostEvent(kind, node_id, detail)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a broken listener must not keep the event from the others
                log.exception("event listener failed on %s", event)
