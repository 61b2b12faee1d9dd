"""The way from the tray to the Lent tab and the grant dialogs.

`LentUi` builds and imports the tab (`ui/lending/lent.py`) and the dialogs only when first
wanted, as the Shell does the window; what the tray needs from the start is in
`ui/lending/lent_core.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import shiboken6
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QMainWindow

from cadre_desktop.errors import MachineError
from cadre_desktop.ui.actions import Actions
from cadre_desktop.ui.bridge import HostBridge
from cadre_desktop.ui.lending.lent_core import LentModel

if TYPE_CHECKING:
    from PySide6.QtWidgets import QTabWidget

    from cadre_desktop.host.host import Host
    from cadre_desktop.host.lend_host import Lending
    from cadre_desktop.ui.lending.lent import LentView
    from cadre_desktop.ui.nodes.window import NodeWindow


class LentUi(QObject):
    """The Lent tab, the grant dialogs and the way to them, for the Shell.

    `window()` gives the node window, building it if need be; the Shell calls
    `attach` once it has built it, and the tab goes in then."""

    def __init__(self, host: Host, bridge: HostBridge, actions: Actions, window: Callable[[], NodeWindow],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host, self.actions, self._window = host, actions, window
        self.model = LentModel(host, bridge, self)
        self._view: LentView | None = None
        self._tabs: QTabWidget | None = None
        self._attached: QMainWindow | None = None

    def attach(self, window: QMainWindow) -> None:
        from cadre_desktop.ui.lending.lent import LentView, install_tab

        view = self._view = LentView(self.host, self.model, self.actions)
        self._tabs = install_tab(window, view, self.model)
        view.lend_requested.connect(self.ask_lend)
        view.link_requested.connect(self.show_link)
        self._attached = window

    @property
    def view(self):
        self._window()
        return self._view

    @property
    def tabs(self):
        self._window()
        return self._tabs

    def show_lent(self) -> None:
        window = self._window()
        window.present()
        if self._tabs is not None and self._view is not None:
            self._tabs.setCurrentWidget(self._view)
        self.model.set_ticking(True)

    def _parent(self):
        window = self._attached
        return window if window is not None and shiboken6.isValid(window) and window.isVisible() else None

    def _lending(self) -> Lending:
        lending = self.host.lending
        if lending is None:
            raise MachineError("Lending is not ready yet; try again in a moment.", code="not_ready")
        return lending

    def ask_lend(self):
        from cadre_desktop.ui.lending.grant_dialog import GrantDialog

        dialog = GrantDialog(self._parent(), self.host.settings.lend_max_nodes, self._create)
        dialog.open()
        return dialog

    def _create(self, dialog, label, max_nodes, expires_in_s) -> None:
        async def make():  # the host may still be starting: lending is looked up when it runs
            lending = self._lending()
            grant = await lending.create_grant(label, max_nodes, expires_in_s)
            return grant, await lending.link_of(grant.id)

        def made(result) -> None:
            if shiboken6.isValid(dialog):  # it may have been closed meanwhile
                dialog.show_link(result[0].label, result[1])

        task = self.actions.run("make a grant", make(), done=made)
        task.add_done_callback(
            lambda t: shiboken6.isValid(dialog) and (t.cancelled() or t.exception()) and dialog.failed())

    def show_link(self, grant_id: str):
        from cadre_desktop.ui.lending.grant_dialog import GrantDialog

        grant = self.model.grant(grant_id)
        if grant is None:
            return None
        dialog = GrantDialog(self._parent(), self.host.settings.lend_max_nodes, self._create)

        def show(link: str) -> None:
            dialog.show_link(grant.label, link)
            dialog.open()
        self.actions.run(f"show the link of {grant.label}", self._lending().link_of(grant_id), grant_id, done=show)
        return dialog
