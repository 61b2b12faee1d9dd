"""The Lent side the tray needs from the start, and the way to the rest.

`LentModel` holds the grants and lent nodes as the Host's lending sees them: the
tray counts the lent nodes in its colour, tooltip and menu, so it lives as long
as the tray. `LentUi` (`ui/lending/lent_ui.py`) opens the Lent tab (`ui/lending/lent.py`) and
the grant dialogs, building them only when first wanted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from PySide6.QtCore import QObject, QTimer, Signal

from cadre_desktop.errors import NoSuchThing
from cadre_desktop.host.core.records.records import NodeStatus
from cadre_desktop.host.lending.donations import DONATION_SUPERVISED, DonationStatus
from cadre_desktop.host.lending.views import DonationView, GrantView
from cadre_desktop.ui.bridge import HostBridge
from cadre_desktop.ui.nodes.model import tick_while_shown
from cadre_desktop.ui.tray.status import COLOURS, HELD_COLOURS, TrayState, seconds_until, utcnow


def donation_state(v: DonationView) -> TrayState:
    if v.status == DonationStatus.ERROR:
        return TrayState.ERROR
    if v.status == DonationStatus.PROVISIONING or (v.status in DONATION_SUPERVISED and not v.running):
        return TrayState.BUSY
    if v.status == DonationStatus.AWAITING_SEED:
        return TrayState.UNCLAIMED
    return TrayState.JOINED


#: A held lent node's dot: a held hosted node's.
_HELD_AS = {DonationStatus.PAUSED: NodeStatus.PAUSED, DonationStatus.SLEEPING: NodeStatus.SLEEPING,
            DonationStatus.DONE: NodeStatus.DONE}


def donation_colour(v: DonationView) -> str:
    """The Lent tab's colour of a lent node: a hold's own when held, else its state's."""
    held = next((node for lent, node in _HELD_AS.items() if v.status == lent), None)
    return HELD_COLOURS[held] if held is not None else COLOURS[donation_state(v)]


def donation_words(v: DonationView, now: datetime) -> str:
    if v.status in DONATION_SUPERVISED and not v.running:
        if v.waiting_for == "keyring":
            return "Waiting for the keyring"
        left = seconds_until(v.next_retry_at, now)
        return f"Restarting in {left} s" if left else "Restarting…"
    words: dict[str, str] = {DonationStatus.PROVISIONING.value: "Starting…",
                             DonationStatus.AWAITING_SEED.value: "Waiting for its seed",
                             DonationStatus.SEEDED.value: f"Seeded for {v.party_id}", DonationStatus.ERROR.value: "Error"}
    return words.get(v.status, v.status)


@dataclass(frozen=True)
class LentNoticeView:
    """What a notification says of a lent node (the fields a hosted node's view gives it)."""

    id: str
    name: str
    status: str
    mode: str
    last_exit: str | None
    last_error: str | None
    lent: bool = True


def lent_notice_view(host, donation_id: str) -> LentNoticeView | None:
    lending = getattr(host, "lending", None)
    try:
        v = lending.views.donation(donation_id) if lending is not None and lending.views is not None else None
    except NoSuchThing:  # the loan ended meanwhile: nothing to tell about it
        return None
    if v is None:
        return None
    return LentNoticeView(v.id, f"The node lent to {v.party_id}", v.status, "donated", v.last_exit, v.last_error)


class LentModel(QObject):
    """Grants and lent nodes as the Host's lending sees them now."""

    refreshed = Signal()

    def __init__(self, host, bridge: HostBridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.now = utcnow()
        self._grants: list[GrantView] = []
        self._donations: list[DonationView] = []
        self._tick = QTimer(self)
        self._tick.setInterval(1000)
        self._tick.timeout.connect(self.refresh)
        bridge.happened.connect(self._on_event)
        self.refresh()

    @property
    def views(self):
        lending = getattr(self.host, "lending", None)
        return lending.views if lending is not None else None

    def _on_event(self, kind: str, _id: str) -> None:
        if kind.startswith(("grant", "donation")) or kind in ("woke", "address"):
            self.refresh()

    def set_ticking(self, on: bool) -> None:
        tick_while_shown(self._tick, on, self.refresh)

    def refresh(self) -> None:
        self.now = utcnow()
        views = self.views
        self._grants = views.grants() if views is not None else []
        self._donations = views.donations() if views is not None else []
        self.refreshed.emit()

    def grants(self) -> list[GrantView]:
        return list(self._grants)

    def donations(self, grant_id: str | None = None) -> list[DonationView]:
        return [d for d in self._donations if grant_id is None or d.grant_id == grant_id]

    def grant(self, grant_id: str) -> GrantView | None:
        return next((g for g in self._grants if g.id == grant_id), None)

    def donation(self, donation_id: str) -> DonationView | None:
        return next((d for d in self._donations if d.id == donation_id), None)

    def states(self) -> list[TrayState]:
        """What the lent nodes add to the tray's colour."""
        return [donation_state(d) for d in self._donations]
