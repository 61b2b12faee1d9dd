"""The window's *Move to…*: shown only on a computer of a fleet, enabled for a node that answers, and it
asks the fleet's shared state to move the node to the computer a person picks."""

from __future__ import annotations

from cadre_desktop.host.fleet.computers import Computer, FleetDoc

NAS_ID = "pc_nas234567890"


def added(shell, aio, name: str):
    shell.actions.add(name)
    return aio.wait(lambda: next((v for v in shell.model.views() if v.name == name and v.ready), None))


def test_move_to_is_hidden_on_a_computer_in_no_fleet(shell, aio):
    view = added(shell, aio, "Kitchen")
    shell.window.select(view.id)
    shell.window.update_buttons()
    assert shell.window.move_button.isHidden()


def test_move_to_moves_the_selected_node_to_the_computer_picked(shell, aio, monkeypatch):
    from PySide6.QtWidgets import QInputDialog

    host = shell.host
    aio.run(host.fleetrun.store.stop())  # the real store stays out of it: the move is asked, not made
    view = added(shell, aio, "Study")
    fleet = host.fleet
    monkeypatch.setattr(fleet, "doc", FleetDoc(fleet.doc.self_id, fleet.doc.self_cert, (
        Computer(NAS_ID, "nas", "127.0.0.1:9", "sha256:00", "x", "2026-12-07T01:00:00+00:00"),)))
    moved: list[tuple[str, str]] = []

    async def move(node_id: str, to: str) -> dict:
        moved.append((node_id, to))
        return {"moved": node_id}
    monkeypatch.setattr(host.fleetrun, "move", move)
    asked: list[list[str]] = []

    def pick(parent, title, label, items, current=0, editable=False):
        asked.append(list(items))
        return items[0], True
    monkeypatch.setattr(QInputDialog, "getItem", pick)
    window = shell.window
    window.select(view.id)
    window.update_buttons()
    assert not window.move_button.isHidden() and window.move_button.isEnabled()
    window.move_button.click()
    aio.wait(lambda: moved)
    assert moved == [(view.id, NAS_ID)] and asked == [[f"nas ({NAS_ID})"]]
