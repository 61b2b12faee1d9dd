"""Caps in the window: Preferences' default caps (checked like settings.json) and the caps in a
node's details."""

from __future__ import annotations

import json

from cadre_desktop.settings import Settings
from cadre_desktop.ui.nodes.explain import caps_words
from cadre_desktop.ui.prefs.caps_prefs import CapsBox
from tests.support.fake_host import make_view


def test_the_caps_box_shows_the_settings_and_gives_back_their_keys(qtbot):
    box = CapsBox()
    qtbot.addWidget(box)
    box.fill(Settings(node_cpu_percent=50, node_memory_mb=256, node_low_priority=False))
    assert (box.cpu.value(), box.memory.value(), box.low_priority.isChecked()) == (50, 256, False)
    box.cpu.setValue(0)
    assert box.changes() == {"node_cpu_percent": None, "node_memory_mb": 256, "node_low_priority": False}


def test_preferences_save_default_caps_and_refuse_a_memory_cap_below_32(shell, home, qtbot):
    before = json.loads((home / "settings.json").read_text())
    dialog = shell.ask_preferences()
    dialog.caps.memory.setValue(16)
    dialog.accept()
    assert dialog.isVisible() and "'node_memory_mb' must be a whole number of MB from 32" in dialog.error.text()
    dialog.caps.memory.setValue(256)
    dialog.caps.cpu.setValue(20)
    dialog.accept()
    assert not dialog.isVisible()
    doc = json.loads((home / "settings.json").read_text())
    assert (doc["node_memory_mb"], doc["node_cpu_percent"]) == (256, 20)
    assert doc.get("node_low_priority") == before.get("node_low_priority")  # unchanged
    qtbot.waitUntil(lambda: shell.host.settings.node_memory_mb == 256)  # applied live: next starts take it


def test_a_nodes_details_say_its_caps_and_how_they_are_held():
    caps = {"cpu_percent": 20, "memory_mb": 256, "low_priority": True, "enforced": True,
            "how": "cgroup v1 memory and cpu controllers"}
    assert caps_words(make_view("n1", "one", caps=caps)) == \
        "CPU 20 % of a core, memory 256 MB, low priority (cgroup v1 memory and cpu controllers)"
    plain = {**caps, "enforced": False, "how": "priority only: memory and cpu caps not enforced here: macOS"}
    assert caps_words(make_view("n1", "one", caps=plain)).endswith(
        ". Not enforced: priority only: memory and cpu caps not enforced here: macOS")
    assert caps_words(make_view("n1", "one")) == "—"
