"""The node stands alone: no host, no UI, no Qt; and it starts light."""

from __future__ import annotations

import subprocess
import sys

from tests.node.conftest import REPO_ROOT

MODULES = [
    "cadre_desktop.node.__main__",
    "cadre_desktop.node.server",
    "cadre_desktop.node.http_api",
    "cadre_desktop.node.joiner",
    "cadre_desktop.node.invitations",
]


def test_node_imports_nothing_from_host_ui_or_qt() -> None:
    script = (
        "import importlib, sys\n"
        f"for name in {MODULES!r}: importlib.import_module(name)\n"
        "bad = [m for m in sys.modules if m.startswith(('PySide6', 'shiboken6', 'qasync',"
        " 'cadre_desktop.host', 'cadre_desktop.ui', 'keyring'))]\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_an_ordinary_start_does_not_load_cryptography() -> None:
    # cryptography is needed only to create a key or sign; a restart reads both
    # raw keys from the identity file.
    script = (
        "import sys\n"
        "import cadre_desktop.node.server, cadre_desktop.node.identity\n"
        "print('cryptography' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, timeout=30
    )
    assert result.stdout.strip() == "False", result.stderr
