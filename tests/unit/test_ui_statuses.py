"""The UI names statuses by their enum members, never by bare strings.

A status renamed in `NodeStatus` (or `DonationStatus`, `GrantState`) then
breaks the UI at import or in its tests, instead of silently turning off a
button whose check compared against the old word.
"""

from __future__ import annotations

import ast

from tests.support import syntax
from tests.support.imports import sources


def _is_status(node: ast.AST) -> bool:
    """`x.status`, `status`, or `x.status.value`."""
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    return (isinstance(node, ast.Attribute) and node.attr == "status") or (
        isinstance(node, ast.Name) and node.id == "status")


def _literal_tuples(tree: ast.Module) -> dict[str, ast.AST]:
    """Module-level names bound to a tuple, list or set display (`SUPERVISED = ("a", "b")`)."""
    found: dict[str, ast.AST] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.Tuple, ast.List, ast.Set)):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = stmt.value
    return found


def _holds_a_string(node: ast.AST, named: dict[str, ast.AST]) -> bool:
    if isinstance(node, ast.Name) and node.id in named:
        node = named[node.id]
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_holds_a_string(element, named) for element in node.elts)
    if isinstance(node, ast.Dict):  # {"error": "Error"}.get(v.status)
        return any(_holds_a_string(key, named) for key in node.keys if key is not None)
    return False


def bare_status_strings(source: str, filename: str = "<ui>") -> list[str]:
    """Every comparison (==, !=, in, not in) or lookup of a status against a bare string."""
    tree = syntax.parse(source, filename)
    named = _literal_tuples(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_status(o) for o in operands) and any(
                    _holds_a_string(o, named) for o in operands if not _is_status(o)):
                found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and _is_status(node.args[0]) and _holds_a_string(node.func.value, named)):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_ui_module_compares_a_status_with_a_bare_string():
    found = [hit for path in sources("ui", "*.py") for hit in bare_status_strings(path.read_text(), path.name)]
    assert found == [], "compare with NodeStatus / DonationStatus / GrantState members:\n" + "\n".join(found)


def test_the_check_finds_each_way_a_bare_status_string_hides():
    source = '''
SUPERVISED = ("unclaimed", "joining")
def f(v, status):
    a = v.status == "error"
    b = "joined" != v.status
    c = v.status in ("spawning", "joining")
    d = v.status in SUPERVISED
    e = status == "unclaimed"
    g = {"error": "Error"}.get(v.status, v.status)
    h = v.status.value == "joined"
'''
    found = bare_status_strings(source)
    assert [hit.split(":")[1] for hit in found] == ["4", "5", "6", "7", "8", "9", "10"]


def test_the_check_leaves_enum_members_and_other_strings_alone():
    source = '''
from cadre_desktop.host.core.records.records import NodeStatus, SUPERVISED
def f(v):
    a = v.status == NodeStatus.ERROR
    b = v.status in (NodeStatus.SPAWNING, NodeStatus.JOINING)
    c = v.status in SUPERVISED
    d = v.waiting_for == "keyring"
    e = {NodeStatus.ERROR: "Error"}.get(v.status)
'''
    assert bare_status_strings(source) == []
