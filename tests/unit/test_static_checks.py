"""ruff and mypy run in the suite (pyproject.toml holds their settings): the engine, the wire
format and the basics strictly typed, everything else checked, and the lint clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "pyproject.toml"


def run(tool: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_mypy_finds_nothing():
    done = run("mypy", "--config-file", str(CONFIG))
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_finds_nothing():
    done = run("ruff", "check", "--no-cache", "cadre_desktop", "tests", "bench")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_the_engine_is_checked_strictly_and_the_ui_is_not(tmp_path):
    """The per-module settings reach what they name: an unannotated function is an error in the
    engine and allowed in the UI (proven on planted modules, laid out as the package is)."""
    for package in ("cadre_desktop", "cadre_desktop/host", "cadre_desktop/ui"):
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    planted = "def untyped(x):\n    return x\n"
    (tmp_path / "cadre_desktop/host/planted.py").write_text(planted)
    (tmp_path / "cadre_desktop/ui/planted.py").write_text(planted)
    args = ("--config-file", str(CONFIG), "--cache-dir", str(tmp_path / ".cache"))
    engine = run("mypy", *args, "cadre_desktop/host/planted.py", cwd=tmp_path)
    ui = run("mypy", *args, "cadre_desktop/ui/planted.py", cwd=tmp_path)
    assert engine.returncode == 1 and "no-untyped-def" in engine.stdout, engine.stdout
    assert ui.returncode == 0, ui.stdout


def test_ruff_sees_a_planted_fault(tmp_path):
    (tmp_path / "planted.py").write_text("import os\n")
    done = run("ruff", "check", "--no-cache", "--config", str(CONFIG), str(tmp_path / "planted.py"))
    assert done.returncode == 1 and "F401" in done.stdout, done.stdout
