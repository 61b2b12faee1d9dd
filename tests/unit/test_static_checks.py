"""ruff and mypy run in the suite (pyproject.toml holds their settings): the engine, the wire
format and the basics strictly typed, everything else checked, and the lint clean."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "pyproject.toml"
PKG = ROOT / "cadre_desktop"
# Checked strictly, whole: the engine, the wire format, the basics' rooms and every top-level module.
STRICT_ROOMS = ("host", "wire", "files", "logs", "keyrings", "net")


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


def strict_patterns(config: dict[str, Any]) -> list[str]:
    """The modules mypy's strict override names (the one with `disallow_untyped_defs`)."""
    mypy = config["tool"]["mypy"]
    patterns = [p for o in mypy["overrides"] if o.get("disallow_untyped_defs") for p in o["module"]]
    assert patterns, "no strict override found: every module would be reported"
    return patterns


def covered(module: str, patterns: list[str]) -> bool:
    """As mypy matches: `a.b` only itself, `a.b.*` itself and everything under it."""
    return any(module == p or (p.endswith(".*") and f"{module}.".startswith(p[:-1])) for p in patterns)


def strict_modules(root: Path) -> list[str]:
    """The dotted names of the modules that must be strict: the top level and the strict rooms."""
    paths = sorted(root.glob("*.py")) + sorted(p for room in STRICT_ROOMS for p in (root / room).rglob("*.py"))
    assert len(paths) > 50, f"the package's modules were not found under {root}: the check would pass on nothing"
    names = []
    for path in paths:
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_engine_wire_and_basics_module_is_on_the_strict_list():
    patterns = strict_patterns(tomllib.loads(CONFIG.read_text(encoding="utf-8")))
    assert [m for m in strict_modules(PKG) if not covered(m, patterns)] == []


def test_the_strict_list_check_sees_a_module_left_off(tmp_path):
    root = tmp_path / "cadre_desktop"
    for rel in ("__init__.py", "errors.py", "planted.py", "host/core/driver.py", "logs/logtail.py",
                "logs/planted.py", "net/deep/planted.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    for n in range(50):
        (root / f"wire/m{n}.py").parent.mkdir(exist_ok=True)
        (root / f"wire/m{n}.py").write_text("")
    patterns = ["cadre_desktop", "cadre_desktop.errors", "cadre_desktop.host.*", "cadre_desktop.wire.*",
                "cadre_desktop.logs.logtail", "cadre_desktop.net"]
    assert [m for m in strict_modules(root) if not covered(m, patterns)] == [
        "cadre_desktop.planted", "cadre_desktop.logs.planted", "cadre_desktop.net.deep.planted"]
