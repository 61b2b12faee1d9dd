"""docs/architecture.md names the code it walks through as `path.py:Name` or `path.py:Class.method`
(the walks of a crash, a pause and a node's own hold are numbered steps of such names). Each one must
still be there: a walk that names a function the code no longer has is a walk nobody can follow."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import syntax

PKG = Path(__file__).parents[2] / "cadre_desktop"
ARCHITECTURE = PKG.parent / "docs" / "architecture.md"
REFERENCE = re.compile(r"`([a-z_/]+\.py):([A-Za-z_][A-Za-z0-9_.]*)`")


def defined_names(path: Path) -> set[str]:
    """Every top-level function and class of a module, and `Class.method` for each class's own functions."""
    tree = syntax.parse(path.read_text(encoding="utf-8"), str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names.update(f"{node.name}.{item.name}" for item in node.body
                         if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)))
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def broken_references(doc: str, root: Path) -> list[str]:
    """The `path.py:Name` references of `doc` whose module or name is not in the package at `root`."""
    broken = []
    for rel, name in REFERENCE.findall(doc):
        path = root / rel
        if not path.is_file():
            broken.append(f"{rel}:{name} (no such module)")
        elif name not in defined_names(path):
            broken.append(f"{rel}:{name}")
    return broken


def test_every_function_the_architecture_names_is_in_the_code():
    doc = ARCHITECTURE.read_text(encoding="utf-8")
    assert len(REFERENCE.findall(doc)) >= 30, "the walks should name their steps as `path.py:Class.function`"
    assert broken_references(doc, PKG) == []


def test_a_reference_to_a_function_gone_is_found(tmp_path):
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "a.py").write_text("class A:\n    def kept(self):\n        pass\n\ndef free():\n    pass\n")
    doc = "1. `host/a.py:A.kept`, then `host/a.py:free`; `host/a.py:A.gone`; `host/b.py:B.run`"
    assert broken_references(doc, tmp_path) == ["host/a.py:A.gone", "host/b.py:B.run (no such module)"]
