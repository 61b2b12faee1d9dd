"""The sizes a maintainer can hold in their head: no module of the package over 500
lines, no function over 60, no folder over 15 modules. A longer one is split by what it does, not by where it
happens to be long; these tests say which one grew. Also: every module on the map in
docs/architecture.md, and no `asyncio.wait_for` (see `wait_for_calls`)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import syntax

PKG = Path(__file__).parents[2] / "cadre_desktop"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_FOLDER_MODULES = 15


def sources() -> list[Path]:
    found = sorted(PKG.rglob("*.py"))
    assert len(found) > 100, "the package's modules were not found: every rule here would pass on nothing"
    return found


def long_functions(path: Path, limit: int, root: Path = PKG.parent) -> list[str]:
    tree = syntax.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None  # ast.parse sets it
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_the_package_is_where_the_rules_look():
    assert len(sources()) > 50


def test_no_module_is_over_500_lines():
    over = [f"{p.relative_to(PKG.parent)} ({n} lines)" for p in sources()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert not over, over


def test_no_function_is_over_60_lines():
    over = [row for p in sources() for row in long_functions(p, MAX_FUNCTION_LINES)]
    assert not over, over


def test_the_function_rule_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    planted = tmp_path / "cadre_desktop" / "long.py"
    planted.parent.mkdir()
    planted.write_text(f"def too_long():\n{body}\n", encoding="utf-8")
    assert long_functions(planted, MAX_FUNCTION_LINES, tmp_path) == ["cadre_desktop/long.py:1 too_long (62 lines)"]


ARCHITECTURE = PKG.parent / "docs" / "architecture.md"


def unmapped(doc: str, modules: list[Path], root: Path = PKG) -> list[str]:
    """The modules the map does not name: `host/x.py`, or `x.py` on a line that names `host/`;
    a top-level module as `x.py` with no folder before it."""
    import re

    lines = doc.splitlines()
    missing = []
    for path in modules:
        rel = path.relative_to(root)
        if rel.name == "__init__.py" and len(rel.parts) > 1:
            continue
        bare = re.compile(rf"(?<![\w/]){re.escape(rel.name)}")
        if len(rel.parts) == 1:
            named = any(bare.search(line) for line in lines)
        else:
            folder = "/".join(rel.parts[:-1]) + "/"
            named = rel.as_posix() in doc or any(folder in line and bare.search(line) for line in lines)
        if not named:
            missing.append(rel.as_posix())
    return missing


def test_the_architecture_map_names_every_module():
    assert not unmapped(ARCHITECTURE.read_text(encoding="utf-8"), sources()), \
        "docs/architecture.md should say where these are and what they hold"


def test_the_map_check_sees_a_module_it_does_not_name(tmp_path):
    for rel in ("text.py", "host/core/clock.py", "node/clock.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    doc = "basics: `text.py`\nthe node: `node/clock.py`\n"
    assert unmapped(doc, sorted(tmp_path.rglob("*.py")), tmp_path) == ["host/core/clock.py"]


def wait_for_calls(path: Path, root: Path = PKG.parent) -> list[str]:
    """Calls of `asyncio.wait_for`: on Python 3.11 it can drop a cancel that arrives in
    the same loop turn as the awaited answer, and a loop around it then runs on after
    a quit (the keyring gate hung CI that way). `async with asyncio.timeout(...)` keeps
    the cancel."""
    tree = syntax.parse(path.read_text(encoding="utf-8"), str(path))
    return [f"{path.relative_to(root)}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "wait_for"
            and isinstance(node.value, ast.Name) and node.value.id == "asyncio"]


def test_no_asyncio_wait_for_in_the_package():
    found = [row for p in sources() for row in wait_for_calls(p)]
    assert not found, found


def test_the_wait_for_rule_sees_a_call(tmp_path):
    planted = tmp_path / "cadre_desktop" / "waits.py"
    planted.parent.mkdir()
    planted.write_text("import asyncio\n\nasync def f(c):\n    return await asyncio.wait_for(c, 1)\n",
                       encoding="utf-8")
    assert wait_for_calls(planted, tmp_path) == ["cadre_desktop/waits.py:4"]


def crowded_folders(root: Path, limit: int) -> list[str]:
    """Folders of the package holding more than `limit` modules (`__init__.py` counted): a room a
    reader can take in at a glance holds about a dozen, and one that grows is split by kind."""
    counts: dict[Path, int] = {}
    for path in root.rglob("*.py"):
        if "__pycache__" not in path.parts:
            counts[path.parent] = counts.get(path.parent, 0) + 1
    return sorted(f"{folder.relative_to(root.parent).as_posix()} ({n} modules)"
                  for folder, n in counts.items() if n > limit)


def test_no_folder_of_the_package_holds_over_15_modules():
    assert len(sources()) > 100
    assert crowded_folders(PKG, MAX_FOLDER_MODULES) == []


def test_the_folder_rule_sees_a_sixteenth_module(tmp_path):
    room = tmp_path / "cadre_desktop" / "room"
    room.mkdir(parents=True)
    for i in range(15):
        (room / f"m{i}.py").write_text("")
    assert crowded_folders(tmp_path / "cadre_desktop", MAX_FOLDER_MODULES) == []
    (room / "m15.py").write_text("")
    assert crowded_folders(tmp_path / "cadre_desktop", MAX_FOLDER_MODULES) == ["cadre_desktop/room (16 modules)"]
