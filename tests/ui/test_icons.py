"""Tray icons: one per state and variant, each drawable, all different; the setting picks mono."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QIcon

from cadre_desktop.ui.tray.icons import APP_ICON, TrayIcons, icon_path
from cadre_desktop.ui.tray.status import TrayState

VARIANTS = [(mono, dark) for mono in (False, True) for dark in (False, True)]


@pytest.mark.parametrize("monochrome, dark", VARIANTS)
def test_every_state_has_a_distinct_drawable_icon(qapp, monochrome, dark):
    images = []
    for state in TrayState:
        path = icon_path(state, monochrome=monochrome, dark_panel=dark)
        assert path.is_file(), path
        image = QIcon(str(path)).pixmap(32, 32).toImage()
        assert not image.isNull()
        images.append(bytes(image.constBits()))
    assert len(set(images)) == len(TrayState)


def test_the_monochrome_setting_picks_the_mono_files(qapp):
    assert "-mono-" in icon_path(TrayState.ERROR, monochrome=True, dark_panel=True).name
    assert not TrayIcons(monochrome=True).icon(TrayState.JOINED).isNull()
    assert not QIcon(str(APP_ICON)).isNull()
