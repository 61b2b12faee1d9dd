"""The local driver's one OS seam: no module of the driver asks which OS it runs on but the
seam's platform classes (and the factory that picks one), proven on a planted module."""

from __future__ import annotations

import ast
from pathlib import Path

import cadre_desktop
from cadre_desktop.host.local.system.seam import ProcessOS, for_this_os
from tests.support import syntax

DRIVER = Path(cadre_desktop.__file__).parent / "host" / "local"
#: The seam itself: the factory that picks the class once, and the three platform classes.
SEAM = {"system/seam.py", "system/linux.py", "system/posix.py", "system/windows.py"}


def _asks_the_os(node: ast.AST) -> str | None:
    """`sys.platform`, `os.name`, `platform.system()` (or any `platform.` call): an OS test."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if (node.value.id, node.attr) in {("sys", "platform"), ("os", "name")}:
            return f"{node.value.id}.{node.attr}"
        if node.value.id == "platform":
            return f"platform.{node.attr}"
    if isinstance(node, ast.ImportFrom) and node.module == "platform":
        return "from platform import"
    if isinstance(node, ast.Import) and any(alias.name == "platform" for alias in node.names):
        return "import platform"
    return None


def _platform_parameter(node: ast.AST) -> bool:
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    args = node.args
    return any(a.arg == "platform" for a in [*args.posonlyargs, *args.args, *args.kwonlyargs])


def platform_tests(root: Path) -> list[str]:
    """Every place under `root` outside the seam that takes a `platform` parameter or tests the OS."""
    found = []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name in SEAM:
            continue
        for node in ast.walk(syntax.parse(path.read_text(encoding="utf-8"))):
            what = "a platform parameter" if _platform_parameter(node) else _asks_the_os(node)
            if what:
                found.append(f"{name}:{getattr(node, 'lineno', 0)} {what}")
    return found


def test_no_module_of_the_driver_takes_a_platform_or_tests_the_os_outside_the_seam():
    modules = list(DRIVER.rglob("*.py"))
    assert len(modules) > 20, "the walk found the driver's modules"
    assert {m.relative_to(DRIVER).as_posix() for m in modules} >= SEAM, "the seam's modules are where it says"
    assert platform_tests(DRIVER) == []


def test_a_planted_platform_test_or_parameter_is_found(tmp_path):
    (tmp_path / "system").mkdir()
    (tmp_path / "system" / "linux.py").write_text("import sys\nLINUX = sys.platform == 'linux'\n")  # the seam's own
    (tmp_path / "planted.py").write_text(
        "import os, sys\n"
        "def start(command, platform: str = sys.platform):\n"
        "    return os.name == 'nt'\n")
    (tmp_path / "asks.py").write_text("import platform\nWHERE = platform.system()\n")
    assert platform_tests(tmp_path) == [
        "asks.py:1 import platform", "asks.py:2 platform.system",
        "planted.py:2 a platform parameter", "planted.py:2 sys.platform", "planted.py:3 os.name",
    ]


def test_this_computers_seam_is_a_whole_process_os():
    """The factory gives a class with every call of the Protocol (a missing one fails here)."""
    seam = for_this_os()
    calls = [name for name in dir(ProcessOS) if not name.startswith("_")]
    assert len(calls) > 20
    assert [name for name in calls if not hasattr(seam, name)] == []


# -- the driver over a seam faked whole -------------------------------------------------------------

def _handle(pid: int = 40, pgid: int | None = 40):
    from cadre_desktop.host.local.handles import Handle
    from cadre_desktop.host.local.system.procs import Identity

    return Handle("n1.a", "n1", pid, Identity("1"), 1, 2, "", pgid=pgid)


def test_a_stop_is_one_call_to_the_seam_per_step(tmp_path):
    """The Ender asks the seam once to terminate, once to kill; nothing else is entered."""
    from cadre_desktop.host.local.teardown import Ender
    from tests.support.fake_os import FakeOS

    fake = FakeOS(alive={40})
    system: ProcessOS = fake  # the fake is a whole ProcessOS (mypy checks it here)
    ender = Ender(tmp_path, system)
    handle = _handle()
    ender.signal(handle, kill=False)
    assert fake.calls == [("signal_group", 40, None, False)] and not ender.group_gone(handle)
    ender.signal(handle, kill=True)
    assert fake.calls[-1] == ("signal_group", 40, None, True) and ender.group_gone(handle)


def test_a_leader_that_died_leaves_nothing_in_its_group_and_a_job_is_ended_by_the_seam(tmp_path, caplog):
    from cadre_desktop.host.local.teardown import Ender
    from tests.support.fake_os import FakeOS

    fake = FakeOS(alive={40})
    ender = Ender(tmp_path, fake)
    ender.end_now(_handle())
    assert fake.calls == [("end_group_now", 40, None)] and "ending them" in caplog.text
    windows_like = FakeOS(groups=False)
    handle = _handle(pgid=None)
    handle._job_handle = "JOB"
    Ender(tmp_path, windows_like).end_now(handle)
    assert windows_like.calls == [("end_group_now", None, "JOB")]
