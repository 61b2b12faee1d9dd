"""The tray's *Add a computer…* and *Join computers…*: the code, its address and QR shown; a join asked with what was typed."""

from __future__ import annotations

from PySide6.QtWidgets import QDialogButtonBox

from cadre_desktop.errors import InvalidState
from cadre_desktop.ui.actions import Actions
from cadre_desktop.ui.fleet.pairing import FleetUi, InviteDialog, JoinComputersDialog, qr_text

INVITE = {"code": "7-ab3k-9qzp", "expires_at": "2026-12-07T02:10:00+00:00", "address": "192.168.1.20:28091"}


class FakeFleet:
    def __init__(self, refuse: bool = False) -> None:
        self.joined: list[tuple[str, str]] = []
        self.refuse = refuse

    async def invite(self):
        return dict(INVITE)

    async def join(self, code: str, address: str):
        if self.refuse:
            raise InvalidState("The pairing code is wrong.")
        self.joined.append((code, address))
        return {"paired": {"id": "pc_other2345678", "name": "nas"}, "computers": []}


class FleetHost:
    def __init__(self, fleet: FakeFleet) -> None:
        self.fleet = fleet


def test_add_a_computer_shows_the_code_its_address_and_a_qr_of_the_join_command(qtbot, aio):
    ui = FleetUi(FleetHost(FakeFleet()), Actions(object()))
    ui.ask_add_computer()
    qtbot.waitUntil(lambda: any(isinstance(d, InviteDialog) for d in ui.dialogs), timeout=10_000)
    dialog = next(d for d in ui.dialogs if isinstance(d, InviteDialog))
    qtbot.addWidget(dialog)
    assert dialog.code.text() == "7-ab3k-9qzp"
    assert "192.168.1.20:28091" in dialog.address.text()
    assert dialog.qr._matrix and qr_text(INVITE) == "cadre-desktop fleet join 7-ab3k-9qzp 192.168.1.20:28091"


def test_join_computers_asks_the_fleet_with_the_code_and_address_typed(qtbot, aio):
    fleet = FakeFleet()
    ui = FleetUi(FleetHost(fleet), Actions(object()))
    ui.ask_join_computers()
    dialog = next(d for d in ui.dialogs if isinstance(d, JoinComputersDialog))
    qtbot.addWidget(dialog)
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    assert not ok.isEnabled()
    dialog.code.setText(" 7-ab3k-9qzp ")
    dialog.address.setText("192.168.1.20:28091")
    assert ok.isEnabled()
    ok.click()
    qtbot.waitUntil(lambda: fleet.joined == [("7-ab3k-9qzp", "192.168.1.20:28091")], timeout=10_000)


def test_a_refused_code_is_shown_as_an_error(qtbot, aio, monkeypatch):
    shown = []
    monkeypatch.setattr("cadre_desktop.ui.actions.show_error", lambda parent, error, doing: shown.append((error, doing)))
    ui = FleetUi(FleetHost(FakeFleet(refuse=True)), Actions(object()))
    ui.join("7-ab3k-9qzp", "192.168.1.20:28091")
    qtbot.waitUntil(lambda: bool(shown), timeout=10_000)
    assert "wrong" in shown[0][0].message and shown[0][1] == "pair with the other computer"
