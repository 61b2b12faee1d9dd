"""The engine and the node never import Qt (STYLE habit 1)."""

import ast
import subprocess
import sys
from pathlib import Path

from tests.support.imports import imported

PKG = Path(__file__).parents[2] / "cadre_desktop"


def imported_modules(path: Path) -> set[str]:
    return {module for module, _ in imported(PKG, path)}


def test_host_and_node_sources_never_import_qt_or_ui():
    checked = 0
    for layer in ("host", "node"):
        for path in (PKG / layer).rglob("*.py"):
            checked += 1
            for name in imported_modules(path):
                assert not name.startswith(("PySide6", "qasync", "cadre_desktop.ui")), f"{path} imports {name}"
    assert checked >= 5


def test_node_never_imports_the_host():
    for path in (PKG / "node").rglob("*.py"):
        for name in imported_modules(path):
            assert not name.startswith("cadre_desktop.host"), f"{path} imports {name}"


def test_importing_the_engine_loads_no_qt():
    code = (
        "import sys, pkgutil, importlib, cadre_desktop.host as h, cadre_desktop.node as n\n"
        "for pkg in (h, n):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if not m.name.endswith('__main__'): importlib.import_module(m.name)\n"
        "print(sorted(k for k in sys.modules if k.startswith(('PySide6', 'qasync'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


#: Modules both the node and the host may import (the node imports nothing from host/).
SHARED = ("text.py", "netguard.py", "logfilter.py", "fdlimit.py", "logpump.py", "atomicfile.py", "errors.py")


def test_shared_modules_import_neither_host_nor_node_nor_ui():
    for name in SHARED:
        for module in imported_modules(PKG / name):
            assert not module.startswith(("cadre_desktop.host", "cadre_desktop.node", "cadre_desktop.ui",
                                          "PySide6", "qasync")), f"{name} imports {module}"


def test_node_imports_only_itself_and_the_shared_modules():
    allowed = {f"cadre_desktop.{name[:-3]}" for name in SHARED} | {"cadre_desktop"}
    for path in (PKG / "node").rglob("*.py"):
        for module in imported_modules(path):
            if module.startswith("cadre_desktop") and not module.startswith("cadre_desktop.node"):
                assert module in allowed, f"{path} imports {module}"


def test_the_log_pump_needs_only_the_standard_library():
    # It runs as `python -I -S logpump.py`: no site-packages, not even our own package.
    for module in imported_modules(PKG / "logpump.py"):
        assert module.split(".")[0] in sys.stdlib_module_names or module == "__future__", module


def test_nothing_but_the_lifecycle_writes_a_record():
    """One owner of a node's life: the store's writers (hosted or lent nodes) are called from lifecycle.py only."""
    writers = ("put", "remove", "mark_removed", "removal_done")
    for path in (PKG / "host").rglob("*.py"):
        if path.name in ("lifecycle.py", "store.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in writers
                    and isinstance(node.func.value, ast.Attribute) and node.func.value.attr in ("store", "donations")):
                raise AssertionError(f"{path.name}:{node.lineno} writes a record with store.{node.func.attr}")


def test_the_engine_speaks_to_compute_only_through_the_driver_seam():
    for name in ("supervisor.py", "passes.py", "service.py", "probe.py", "decide.py", "lifecycle.py", "lending.py", "lend_kind.py"):
        imports = imported_modules(PKG / "host" / name)
        assert not {"cadre_desktop.host.orchestrator", "cadre_desktop.host.procs", "subprocess"} & imports, name


def test_shared_basics_at_the_top_level_import_no_layer_above_them():
    """The package's top level holds the basics every layer shares (paths, settings,
    errors, atomic files, text, logging set-up, autostart): none of them reaches up into
    the engine, the node, a front end or Qt."""
    above = ("cadre_desktop.host", "cadre_desktop.node", "cadre_desktop.ui", "cadre_desktop.cli",
             "PySide6", "qasync")
    basics = [p for p in PKG.glob("*.py") if p.name not in ("__main__.py",)]
    assert len(basics) >= 10
    for path in basics:
        for module in imported_modules(path):
            assert not module.startswith(above), f"{path.name} imports {module}"


def test_the_engine_never_imports_a_front_end():
    for path in (PKG / "host").rglob("*.py"):
        for module in imported_modules(path):
            assert not module.startswith(("cadre_desktop.cli", "cadre_desktop.ui")), f"{path} imports {module}"


def test_the_command_line_front_ends_load_no_qt():
    """The CLI, doctor and the headless host stay light: Qt is loaded only when the one
    executable's dispatcher is asked for the tray (or doctor's display probe, which runs
    in a child of its own)."""
    code = (
        "import sys, pkgutil, importlib, cadre_desktop.cli as c\n"
        "for m in pkgutil.walk_packages(c.__path__, c.__name__ + '.'): importlib.import_module(m.name)\n"
        "print(sorted(k for k in sys.modules if k.startswith(('PySide6', 'qasync', 'cadre_desktop.ui'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
