"""The claim QR dialog: the code decodes to the claim URL at any size, and it closes on claim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.claim_link import claim, claim_when_up, read_qr


@pytest.fixture
def unclaimed(shell, aio):
    """A node added through the UI, running and answering its status probe."""
    shell.actions.add("Kitchen")
    view = aio.wait(lambda: next((v for v in shell.model.views() if v.ready and v.claim_url), None))
    return view


def test_qr_dialog_image_decodes_to_the_claim_url(shell, unclaimed, aio, qtbot, tmp_path):
    dialog = shell.qr_dialogs.get(unclaimed.id) or shell.show_qr(unclaimed.id)
    qtbot.waitExposed(dialog)
    assert dialog.url.text() == unclaimed.claim_url
    assert dialog.title.text() == "Kitchen"
    shot = tmp_path / "dialog.png"
    assert dialog.grab().save(str(shot))
    assert read_qr(shot) == [unclaimed.claim_url]


@pytest.mark.parametrize("side", [160, 243, 611])
def test_qr_code_stays_readable_at_any_size(shell, unclaimed, qtbot, tmp_path, side):
    from cadre_desktop.ui.nodes.qr import QrCode

    code = QrCode()
    qtbot.addWidget(code)
    code.setMinimumSize(side, side)
    code.resize(side, side)
    code.set_url(unclaimed.claim_url)
    shot = tmp_path / f"qr-{side}.png"
    assert code.grab().save(str(shot))
    assert read_qr(shot) == [unclaimed.claim_url]


def test_url_is_selectable_text(shell, unclaimed):
    dialog = shell.show_qr(unclaimed.id)
    assert dialog.url.isReadOnly()
    dialog.url.selectAll()
    assert dialog.url.selectedText() == unclaimed.claim_url


def test_regenerate_asks_first_then_shows_a_new_code(shell, unclaimed, aio, monkeypatch, tmp_path):
    from cadre_desktop.ui.prefs import dialogs

    asked = []
    monkeypatch.setattr(dialogs, "confirm", lambda *a, **k: asked.append((a, k)))
    dialog = shell.show_qr(unclaimed.id)
    dialog.regenerate.click()
    assert len(asked) == 1 and "stop working" in asked[0][1]["detail"]
    assert dialog.url.text() == unclaimed.claim_url  # not answered: nothing changed

    monkeypatch.setattr(dialogs, "confirm", lambda parent, title, text, yes, then, **k: then())
    dialog.regenerate.click()
    new_url = aio.wait(lambda: dialog.url.text() != unclaimed.claim_url and dialog.url.text())
    shot = tmp_path / "new.png"
    dialog.qr.grab().save(str(shot))
    assert read_qr(shot) == [new_url]
    aio.wait(lambda: (v := shell.model.view(unclaimed.id)).running and v.pid != unclaimed.pid)
    assert claim_when_up(unclaimed.claim_url, "family")[0] == 403  # the old code stopped working
    assert claim(new_url, "family")[0] == 200


def test_dialog_says_claimed_by_the_cadre_then_closes(shell, unclaimed, aio, qtbot, monkeypatch):
    from cadre_desktop.ui.nodes.qr import QrDialog

    monkeypatch.setattr(QrDialog, "CLOSE_AFTER_MS", 300)
    dialog = shell.show_qr(unclaimed.id)
    qtbot.waitExposed(dialog)
    assert claim(unclaimed.claim_url, "family")[0] == 200
    aio.wait(lambda: dialog.finished_message)
    assert dialog.finished_message == "Kitchen was claimed by family."
    assert "claimed by family" in dialog.claimed_label.text()
    aio.wait(lambda: unclaimed.id not in shell.qr_dialogs)


@pytest.mark.slow
def test_the_dialog_still_reads_at_2x_scale():
    """Regression: at QT_SCALE_FACTOR=2 on a short screen the dialog was sized shorter than its
    content and the link lay over the code's bottom and its quiet zone. The scale is set before
    Qt starts, so the dialog test runs again in a process of its own."""
    env = {**os.environ, "QT_SCALE_FACTOR": "2", "QT_QPA_PLATFORM": "offscreen"}
    here = Path(__file__)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"{here}::test_qr_dialog_image_decodes_to_the_claim_url"],
                          env=env, cwd=here.parents[2], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "1 passed" in done.stdout
