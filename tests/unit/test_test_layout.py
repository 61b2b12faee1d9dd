"""The tests' own house rules, checked on the source (ast), so a newcomer finds things where they are.

- Support code (fakes, rigs, helpers) lives in tests/support/; fixtures and hooks live in
  a conftest.py. Any other module under tests/ is a test module, test_*.py.
- No module imports a test module (test_*) or a conftest: what two modules share is
  support code or a fixture, never one test module reaching into another.
- A conftest.py holds fixtures and hooks only: no classes, no helper functions.
- Code is parsed through tests/support/syntax.py, never `ast.parse` itself (CPython 3.11.7's
  fails when a leftover thread parses at the same moment: that module says why).
- The fakes implement the seams they stand in for (the fake driver's check is with the
  supervision tests, beside the real driver's).

Each rule is a function over a folder, so the planted-fault tests below prove it can fail.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from tests.support import syntax
from tests.support.imports import imported

TESTS = Path(__file__).resolve().parents[1]


def python_files(root: Path) -> list[Path]:
    found = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    assert found, f"no Python file under {root}: the layout rules would pass on nothing"
    return found


def imported_modules(root: Path, path: Path) -> set[str]:
    """Every module `path` imports, `from a import b` counted as both a and a.b."""
    found: set[str] = set()
    for module, name in imported(root, path):
        found.add(module)
        if name is not None:
            found.add(f"{module}.{name}")
    return found


def stray_modules(root: Path) -> list[str]:
    """Modules outside root/support that are neither test modules, conftest.py nor __init__.py."""
    support = root / "support"
    return [str(p.relative_to(root)) for p in python_files(root)
            if support not in p.parents
            and not (p.name.startswith("test_") or p.name in ("conftest.py", "__init__.py"))]


def misplaced_tests(root: Path) -> list[str]:
    """test_*.py files inside root/support: pytest would collect them as tests."""
    return [str(p.relative_to(root)) for p in python_files(root / "support") if p.name.startswith("test_")]


def imports_of_test_modules(root: Path) -> list[str]:
    """(module, what it imports) for every import of a test module or a conftest under root."""
    bad = []
    for path in python_files(root):
        for name in sorted(imported_modules(root, path)):
            parts = name.split(".")
            if parts[0] == root.name and (parts[-1].startswith("test_") or parts[-1] == "conftest"):
                bad.append(f"{path.relative_to(root)} imports {name}")
    return bad


def conftest_helpers(root: Path) -> list[str]:
    """Top-level classes and plain functions in any conftest.py: support code in the wrong place."""
    bad = []
    for path in python_files(root):
        if path.name != "conftest.py":
            continue
        for node in syntax.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                bad.append(f"{path.relative_to(root)}: class {node.name}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                decorated = any("fixture" in ast.unparse(d) or "hookimpl" in ast.unparse(d)
                                for d in node.decorator_list)
                if not (decorated or node.name.startswith("pytest_")):
                    bad.append(f"{path.relative_to(root)}: def {node.name}")
    return bad


def direct_parses(root: Path) -> list[str]:
    """Calls of `ast.parse` anywhere but tests/support/syntax.py."""
    bad = []
    for path in python_files(root):
        if path.relative_to(root).as_posix() == "support/syntax.py":
            continue
        for node in ast.walk(syntax.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "ast.parse":
                bad.append(f"{path.relative_to(root)}:{node.lineno}")
    return bad


# -- the rules, on this checkout --------------------------------------------------------

def test_support_code_lives_in_tests_support():
    assert stray_modules(TESTS) == []
    assert misplaced_tests(TESTS) == []


def test_no_module_imports_a_test_module_or_a_conftest():
    assert imports_of_test_modules(TESTS) == []


def test_conftest_files_hold_only_fixtures_and_hooks():
    assert conftest_helpers(TESTS) == []


def test_code_is_parsed_through_the_support_module_only():
    assert direct_parses(TESTS) == []


# -- the rules can fail -----------------------------------------------------------------

@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A tests/ tree with one of each fault planted."""
    root = tmp_path / "tests"
    for folder in ("", "unit", "support"):
        (root / folder).mkdir(exist_ok=True)
        (root / folder / "__init__.py").write_text("")
    (root / "unit" / "test_a.py").write_text("SHARED = 1\n")
    (root / "unit" / "test_b.py").write_text("from tests.unit.test_a import SHARED\nfrom . import test_a\n")
    (root / "unit" / "test_c.py").write_text("import tests.unit.conftest\n")
    (root / "unit" / "helpers.py").write_text("def helper(): ...\n")
    (root / "support" / "test_thing.py").write_text("")
    (root / "support" / "rig.py").write_text("from tests.support import polling\n")
    (root / "support" / "reader.py").write_text("import ast\n\nTREE = ast.parse('x = 1')\n")
    (root / "unit" / "conftest.py").write_text(
        "import pytest\n\nclass Rig: ...\n\ndef helper(): ...\n\n@pytest.fixture\ndef rig(): ...\n\n"
        "def pytest_configure(config): ...\n")
    return root


def test_the_layout_checks_find_planted_faults(planted: Path):
    assert stray_modules(planted) == ["unit/helpers.py"]
    assert misplaced_tests(planted) == ["support/test_thing.py"]
    assert imports_of_test_modules(planted) == [
        "unit/test_b.py imports tests.unit.test_a",
        "unit/test_c.py imports tests.unit.conftest",
    ]
    assert conftest_helpers(planted) == ["unit/conftest.py: class Rig", "unit/conftest.py: def helper"]
    assert direct_parses(planted) == ["support/reader.py:3"]


# -- the fakes implement their seams ----------------------------------------------------

def public_methods(cls) -> dict[str, bool]:
    """Public method name -> whether it is a coroutine function."""
    return {name: inspect.iscoroutinefunction(fn) for name, fn in vars(cls).items()
            if callable(fn) and not name.startswith("_")}


@pytest.mark.parametrize("seam", ["cadre_desktop.host.core.clock:Clock", "cadre_desktop.node.clock:Clock"])
def test_the_fake_clock_has_every_call_of_both_clock_seams(seam):
    import importlib

    from tests.support.clock import FakeClock

    module, name = seam.split(":")
    wanted = public_methods(getattr(importlib.import_module(module), name))
    assert wanted, "the seam has no methods: the check would pass on anything"
    have = public_methods(FakeClock)
    assert {m: have.get(m) for m in wanted} == wanted


def test_the_fake_hosts_have_every_call_the_control_api_makes():
    from cadre_desktop.host.edges.served import ServedHost
    from tests.support.fake_host import ExplodingHost, FakeHost

    wanted = public_methods(ServedHost)
    assert len(wanted) >= 10, "the seam has no methods: the check would pass on anything"
    for fake in (FakeHost, ExplodingHost):
        have = {name: inspect.iscoroutinefunction(getattr(fake, name, None)) for name in wanted}
        assert have == wanted, fake
    host = FakeHost(Path("/nonexistent"))
    assert hasattr(host, "paths") and hasattr(host, "lending")


def test_every_test_keyring_is_a_keyring_backend():
    from keyring.backend import KeyringBackend

    from tests.support import keyrings

    fakes = [obj for obj in vars(keyrings).values()
             if inspect.isclass(obj) and obj.__module__ == keyrings.__name__]
    assert len(fakes) >= 6 and all(issubclass(cls, KeyringBackend) for cls in fakes)
