"""Qt stays in ui/, imported by name; the engine is reached only through one adapter."""

from __future__ import annotations

from pathlib import Path

from tests.support.imports import imported, sources

PKG = Path(__file__).resolve().parents[2] / "cadre_desktop"
QT = ("PySide6", "shiboken6", "qasync")


def test_qt_is_imported_only_in_ui_and_never_with_a_star():
    for path in sources():
        in_ui = "ui" in path.relative_to(PKG).parts[:1]
        for module, name in imported(PKG, path):
            if module.startswith(QT):
                assert in_ui, f"{path} imports {module}"
                assert name != "*", f"{path} star-imports {module}"


def test_only_the_bridge_subscribes_to_engine_events_and_only_app_makes_the_loop():
    for path in sources("ui", "*.py"):
        text = path.read_text()
        if path.name != "bridge.py":
            assert ".subscribe(" not in text, f"{path} subscribes to the engine itself"
        if path.name != "app.py":
            assert "QEventLoop(" not in text and "new_event_loop" not in text, f"{path} makes a loop"


def test_the_ui_never_touches_the_store_or_the_orchestrator():
    for path in sources("ui", "*.py"):
        text = path.read_text()
        for inner in (".store.", ".orchestrator.", ".driver.", ".service.", ".supervisor."):
            assert inner not in text, f"{path} reaches into the engine ({inner})"
