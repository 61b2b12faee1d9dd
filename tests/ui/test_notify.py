"""Notifications: exactly one per give-up, one per claim, none for what the person did;
Retry and a click answer them. Delivery through a real notification service is in
tests/e2e/test_notifications.py."""

from __future__ import annotations

import pytest

from tests.support.claim_link import claim
from tests.support.ui_shell import crashing_settings, give_up

CRASHING = crashing_settings()


@pytest.fixture
def shown(shell):
    seen: list[tuple[str, str, str]] = []
    shell.notifier.shown.connect(lambda *args: seen.append(args))
    return seen


@pytest.mark.parametrize("settings_doc", [CRASHING], indirect=True)
def test_one_notification_per_give_up_and_none_on_remove(shell, shown, aio, monkeypatch):
    from cadre_desktop.ui.prefs import dialogs

    node_id = give_up(shell, aio)
    assert len(shown) == 1
    assert shown[0][:2] == (node_id, "Garage stopped")
    assert shown[0][2] == "exited with code 1: node exploded: bad config"  # the node's own last words
    # The engine saying it again is not news.
    shell.bridge.gave_up.emit(node_id, "gave up again")
    assert len(shown) == 1

    monkeypatch.setattr(dialogs, "confirm", lambda parent, title, text, yes, then, **k: then())
    shell.window.select(node_id)
    shell.window.remove_button.click()
    aio.wait(lambda: shell.model.rowCount() == 0 and not shell.actions.busy(node_id))
    assert len(shown) == 1


@pytest.mark.slow
@pytest.mark.parametrize("settings_doc", [CRASHING], indirect=True)
def test_a_retried_node_that_fails_again_notifies_again(shell, shown, aio):
    node_id = give_up(shell, aio)
    shell.actions.retry(node_id)
    aio.wait(lambda: shell.model.view(node_id).status != "error")
    aio.wait(lambda: shell.model.view(node_id).status == "error")
    assert [s[0] for s in shown] == [node_id, node_id]


def test_one_notification_on_claim_and_none_on_restart(shell, shown, aio):
    shell.actions.add("Kitchen")
    view = aio.wait(lambda: next((v for v in shell.model.views() if v.ready), None))
    assert claim(view.claim_url, "family")[0] == 200
    aio.wait(lambda: shown)
    assert shown == [(view.id, "Kitchen was claimed", "It joined the cadre family.")]
    aio.run(shell.host.restart_node(view.id))
    aio.wait(lambda: (v := shell.model.view(view.id)).running and v.pid != view.pid)
    assert len(shown) == 1


def test_pause_all_and_its_end_are_not_news(shell, shown, aio):
    shell.actions.add("Kitchen")
    view = aio.wait(lambda: next((v for v in shell.model.views() if v.ready), None))
    shell.tray.pause_menu.actions()[3].trigger()  # until I resume
    aio.wait(lambda: shell.model.view(view.id).status == "paused")
    shell.tray.resume_action.trigger()
    aio.wait(lambda: shell.model.view(view.id).ready)
    assert shown == []


@pytest.mark.parametrize("settings_doc", [{**CRASHING, "notifications": False}], indirect=True)
def test_the_setting_turns_notifications_off(shell, shown, aio):
    give_up(shell, aio)
    assert shown == []


@pytest.mark.parametrize("settings_doc", [{**CRASHING, "notify_gave_up": False}], indirect=True)
def test_each_kind_has_its_own_switch(shell, shown, aio):
    give_up(shell, aio)
    assert shown == []


@pytest.mark.parametrize("settings_doc", [CRASHING], indirect=True)
def test_clicking_the_notification_opens_the_window_on_its_node(shell, shown, aio, qtbot):
    from cadre_desktop.ui.tray.delivery import DEFAULT

    shell.actions.add("Garage")
    shell.actions.add("Attic")
    aio.wait(lambda: len(shown) == 2)
    last, other = shown[-1][0], shown[0][0]
    shell.window.select(other)
    assert not shell.window.isVisible()
    shell.delivery.acted.emit(f"gave_up:{last}", DEFAULT)  # what the service or the balloon reports
    qtbot.waitExposed(shell.window)
    assert shell.window.selected_id() == last


@pytest.mark.parametrize("settings_doc", [CRASHING], indirect=True)
def test_retry_on_the_notification_retries_the_node_once(shell, shown, aio):
    node_id = give_up(shell, aio)
    before = shell.model.view(node_id).updated_at
    shell.delivery.acted.emit(f"gave_up:{node_id}", "retry")
    assert shell.actions.busy(node_id)
    shell.delivery.acted.emit(f"gave_up:{node_id}", "retry")  # a second press while it runs does nothing more
    aio.wait(lambda: not shell.actions.busy(node_id))
    aio.wait(lambda: shell.model.view(node_id).updated_at != before)
    assert not [w for w in _message_boxes()]  # no "could not retry" error


def _message_boxes():
    from PySide6.QtWidgets import QApplication, QMessageBox

    return [w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]


def test_a_session_with_no_notification_service_keeps_no_connection_open(keyring_env, aio):
    """Each notice asks the bus again (a service may appear); each try that finds none
    closes its connection, so a desktop with no notification daemon leaks none."""
    from cadre_desktop.ui.tray.delivery import Delivery, Notice
    from cadre_desktop.ui.tray.icons import APP_ICON
    from tests.support.session_bus import bus_clients

    before = bus_clients(keyring_env)
    delivery = Delivery(None, APP_ICON)
    try:
        for n in range(3):
            assert aio.run(delivery.send(Notice(key=f"k{n}", node_id="n1", title="Garage stopped", body="x"))) == ""
        assert aio.wait(lambda: bus_clients(keyring_env) == before, timeout=10)
    finally:
        delivery.close()
        delivery.deleteLater()


class _FakeInterface:
    """org.freedesktop.Notifications as desktop-notifier's D-Bus backend holds it."""

    def __init__(self) -> None:
        self.on_action: list = []
        self.on_closed: list = []
        self.closed: list[int] = []

    def on_action_invoked(self, fn) -> None:
        self.on_action.append(fn)

    def on_notification_closed(self, fn) -> None:
        self.on_closed.append(fn)

    async def call_close_notification(self, platform_id: int) -> None:
        self.closed.append(platform_id)

    def act(self, platform_id: int, action: str) -> None:
        for fn in self.on_action:
            fn(platform_id, action)


class _FakeDbusNotifier:
    """desktop-notifier on D-Bus: it forgets a notice at its first action, as the real one does."""

    def __init__(self) -> None:
        from bidict import bidict

        self._backend = type("Backend", (), {})()
        self._backend.interface = _FakeInterface()
        self._backend._platform_to_interface_notification_identifier = bidict()
        self.sent: list = []

    @property
    def ids(self):
        return self._backend._platform_to_interface_notification_identifier

    async def get_capabilities(self):
        from desktop_notifier import Capability

        return frozenset({Capability.TITLE, Capability.BUTTONS, Capability.ON_CLICKED})

    async def send_notification(self, note) -> str:
        self.sent.append(note)
        platform_id = len(self.sent)
        self.ids[platform_id] = f"n{platform_id}"
        note.on_dispatched()
        return f"n{platform_id}"

    async def clear(self, identifier: str) -> None:
        self.ids.inverse.pop(identifier, None)

    def forget(self, platform_id: int) -> None:
        self.ids.pop(platform_id, None)


def test_a_notice_answers_every_action_after_a_click_and_is_closed_by_its_service_id(aio):
    """Regression (issue 39): desktop-notifier forgot a notice at its first action (the click), so its
    Retry did nothing and it could not be withdrawn; a give-up also carried the app's green icon."""
    from cadre_desktop.ui.tray.delivery import DEFAULT, Delivery, Notice
    from cadre_desktop.ui.tray.icons import ALERT_ICON, APP_ICON

    fake = _FakeDbusNotifier()
    delivery = Delivery(None, APP_ICON, make_notifier=lambda _icon: fake, alert_icon=ALERT_ICON)
    acted: list[tuple[str, str]] = []
    delivery.acted.connect(lambda key, action: acted.append((key, action)))
    try:
        notice = Notice("gave_up:n1", "n1", "Garage stopped", "exited", critical=True, actions=(("retry", "Retry"),))
        assert aio.run(delivery.send(notice)) == "service"
        note = fake.sent[0]
        assert note.icon is not None and note.icon.path == ALERT_ICON  # the red warning sign
        assert note.on_clicked is None and note.buttons[0].on_pressed is None  # heard on the bus instead

        fake.forget(1)
        fake._backend.interface.act(1, DEFAULT)  # the click: desktop-notifier forgot it
        fake._backend.interface.act(1, "retry")  # then Retry on the same notice
        fake._backend.interface.act(99, "retry")  # another app's notice: not ours
        assert acted == [("gave_up:n1", DEFAULT), ("gave_up:n1", "retry")]

        aio.run(delivery.withdraw("gave_up:n1"))  # its node is back
        assert fake._backend.interface.closed == [1]

        aio.run(delivery.send(Notice("claimed:n1", "n1", "Garage joined", "ok")))
        assert fake.sent[1].icon is None  # not critical: the app's own icon
        for fn in fake._backend.interface.on_closed:
            fn(2, 2)  # dismissed by the person: nothing left to close
        aio.run(delivery.withdraw_all())
        assert fake._backend.interface.closed == [1]
    finally:
        delivery.close()
        delivery.deleteLater()
