"""Preferences' *Caps per node*: the host's default CPU and memory caps and the nodes' priority.

The keys are settings.json's (`node_cpu_percent`, `node_memory_mb`,
`node_low_priority`), checked by the same rules when saved; 0 in a box is "no cap".
A node's own caps (`cadre-desktop node set`) win over these. A change is taken at
each node's next start.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QCheckBox, QFormLayout, QGroupBox, QSpinBox, QWidget

from cadre_desktop.settings import MAX_MEMORY_MB, Settings, max_cpu_percent


class CapsBox(QGroupBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Caps per node", parent)
        form = QFormLayout(self)
        self.cpu = QSpinBox()
        self.cpu.setRange(0, max_cpu_percent())
        self.cpu.setSpecialValueText("no cap")
        self.cpu.setSuffix(" % of a core")
        self.cpu.setToolTip("The most CPU each node may use, in percent of one core; enforced by the OS "
                            "(`cadre-desktop doctor` says how on this computer)")
        self.memory = QSpinBox()
        self.memory.setRange(0, MAX_MEMORY_MB)
        self.memory.setSpecialValueText("no cap")
        self.memory.setSuffix(" MB")
        self.memory.setToolTip("The most memory each node may use (at least 32 MB); a node past it is stopped "
                               "and started again")
        self.low_priority = QCheckBox("Run nodes at &low priority")
        self.low_priority.setToolTip("The OS's background priority: your own programs come first")
        form.addRow("&CPU:", self.cpu)
        form.addRow("&Memory:", self.memory)
        form.addRow(self.low_priority)

    def fill(self, s: Settings) -> None:
        self.cpu.setValue(s.node_cpu_percent or 0)
        self.memory.setValue(s.node_memory_mb or 0)
        self.low_priority.setChecked(s.node_low_priority)

    def changes(self) -> dict[str, Any]:
        return {"node_cpu_percent": self.cpu.value() or None, "node_memory_mb": self.memory.value() or None,
                "node_low_priority": self.low_priority.isChecked()}
