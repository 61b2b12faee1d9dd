"""No import cycle among cadre_desktop's modules, counting the imports inside functions
and those under `if TYPE_CHECKING:`.

An import inside a function hides a cycle from a module-level reading (Python
only meets it when the function runs), and one under `if TYPE_CHECKING:` never
runs at all, yet either is a cycle all the same: the two modules cannot be
understood, tested or moved apart. A type-only cycle is most often a helper
that takes back the object it was cut out of (STYLE.md, habit 13): it gets what
it uses as typed parameters instead, or the shared type moves down into a
module both import.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.imports import imported, module_name

PKG = Path(__file__).parents[2] / "cadre_desktop"


def module_names(root: Path) -> dict[str, Path]:
    names = {module_name(root, path): path for path in root.rglob("*.py")}
    assert names, f"no module under {root}: the graph would be empty and free of cycles"
    return names


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the package under `root` -> the package's modules it imports, anywhere in
    it, type-only imports too."""
    modules = module_names(root)
    top = root.name

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str | None] = set()
        for module, item in imported(root, path):
            if module.split(".")[0] != top:
                continue
            # `from pkg import module` imports the module; `from module import name` the module.
            full = f"{module}.{item}"
            found.add(known(module) if item is None else full if full in modules else known(module))
        graph[name] = {m for m in found if m and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_cycle_among_the_package_modules_counting_imports_inside_functions_and_type_only_ones():
    graph = import_graph(PKG)
    assert len(graph) > 100 and "cadre_desktop.host.host" in graph
    found = cycles(graph)
    assert found == [], "import cycles (type-only imports counted):\n" + "\n".join(" <-> ".join(c) for c in found)


def _package(tmp_path: Path, modules: dict[str, str]) -> Path:
    pkg = tmp_path / "cadre_desktop"
    (pkg / "host").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "host" / "__init__.py").write_text("")
    for name, text in modules.items():
        (pkg / "host" / f"{name}.py").write_text(text)
    return pkg


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path):
    pkg = _package(tmp_path, {
        "a": "def later():\n    from cadre_desktop.host import b\n",
        "b": "from cadre_desktop.host.a import later\n",
        "c": "from cadre_desktop.host import a\n",  # imports into the cycle: not in it
    })
    assert cycles(import_graph(pkg)) == [["cadre_desktop.host.a", "cadre_desktop.host.b"]]


def test_a_cycle_through_a_type_only_import_is_found(tmp_path):
    pkg = _package(tmp_path, {
        "c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cadre_desktop.host.d import D\n",
        "d": "from . import c\n",
        "e": "import typing\nif typing.TYPE_CHECKING:\n    from .f import F\n",
        "f": "from __future__ import annotations\nfrom cadre_desktop.host.e import E\n",
    })
    assert sorted(cycles(import_graph(pkg))) == [["cadre_desktop.host.c", "cadre_desktop.host.d"],
                                         ["cadre_desktop.host.e", "cadre_desktop.host.f"]]
