"""Reading a module's imports from its source (ast), for the tests that check layers,
cycles and the tests' own layout: one walker, one way of resolving a relative import; and
what importing really loads, in a fresh interpreter (`loaded_after`)."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.support import syntax

REPO = Path(__file__).resolve().parents[2]


def module_name(root: Path, path: Path) -> str:
    """The dotted name of `path` in the package whose folder is `root` (a package is its __init__)."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.AST) -> set[ast.AST]:
    hidden: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                hidden.update(ast.walk(child))
    return hidden


def import_statements(path: Path, *, running_only: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import in the module, inside functions too; `running_only` leaves out those
    under `if TYPE_CHECKING:`, which never run."""
    tree = syntax.parse(path.read_text(encoding="utf-8"), str(path))
    hidden = _type_checking_only(tree) if running_only else set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node not in hidden:
            yield node


def from_base(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a `from … import` reads from; `package` is the importing module's package."""
    base = node.module or ""
    if not node.level:
        return base
    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*anchor, base] if base else anchor)


def package_of(root: Path, path: Path) -> str:
    name = module_name(root, path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imported(root: Path, path: Path, *, running_only: bool = False) -> Iterator[tuple[str, str | None]]:
    """`(module, None)` for each `import module` in `path`, `(module, name)` for each
    `from module import name`, with relative imports resolved against `root`'s package
    (`running_only` as for `import_statements`)."""
    package = package_of(root, path)
    for node in import_statements(path, running_only=running_only):
        if isinstance(node, ast.Import):
            yield from ((alias.name, None) for alias in node.names)
        else:
            base = from_base(node, package)
            yield from ((base, alias.name) for alias in node.names)


PKG = Path(__file__).resolve().parents[2] / "cadre_desktop"


def sources(folder: str = "", pattern: str = "**/*.py") -> list[Path]:
    """The package's modules under `folder` (all of it by default). A folder that moved or
    emptied fails here, so no check that walks the list can pass by walking nothing."""
    found = sorted(p for p in (PKG / folder).glob(pattern) if "__pycache__" not in p.parts)
    assert found, f"cadre_desktop/{folder} holds no module matching {pattern}: the check would walk nothing"
    return found


def loaded_after(script: str, names: tuple[str, ...], env: dict[str, str] | None = None) -> list[str]:
    """The modules named in `names`, or inside one of them (`a` names `a` and `a.b`), that are
    loaded once `script` ran in a fresh interpreter from the repository root."""
    probe = (f"{script}\nimport sys\n"
             f"print(','.join(sorted(m for m in sys.modules if any(m == n or m.startswith(n + '.') for n in {names!r}))))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return [m for m in done.stdout.strip().split(",") if m]
