"""Python source parsed for the tests that read the project's code (layers, house rules, errors).

CPython 3.11.7's `ast.parse` keeps its recursion bookkeeping per interpreter, not per thread:
when another thread parses at the same moment (the `traceback` module does, to place its
carets, in a test's leftover thread), one of the two fails with "SystemError: AST constructor
recursion depth mismatch". So the parsing is done in a child interpreter that runs nothing
else, every project file at the first call, and the trees come back pickled (unpickling builds
the nodes without that bookkeeping); each is kept as its pickle, keyed by the source's hash,
and made anew at each call, so a test may change its tree freely.
"""

from __future__ import annotations

import ast
import hashlib
import pickle
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("cadre_desktop", "tests", "bench", "scripts", "packaging")

_CHILD = """
import ast, pickle, sys
out = []
for source, filename in pickle.load(sys.stdin.buffer):
    try:
        out.append(pickle.dumps(ast.parse(source, filename), protocol=5))
    except SyntaxError as exc:
        out.append(exc)
pickle.dump(out, sys.stdout.buffer, protocol=5)
"""

_parsed: dict[str, bytes | SyntaxError] = {}
_primed = False


def _key(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def _in_child(items: list[tuple[str, str]]) -> None:
    done = subprocess.run([sys.executable, "-c", _CHILD], input=pickle.dumps(items), capture_output=True,
                          timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the parsing child failed: {done.stderr.decode(errors='replace')[-2000:]}")
    for (source, _), tree in zip(items, pickle.loads(done.stdout), strict=True):
        _parsed[_key(source)] = tree


def _prime() -> None:
    global _primed
    _primed = True
    items = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ".venv" not in path.parts:
                items.append((path.read_text(encoding="utf-8"), str(path)))
    _in_child(items)


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, made safe from other threads' parsing (above)."""
    key = _key(source)
    if key not in _parsed and not _primed:
        _prime()
    if key not in _parsed:
        _in_child([(source, filename)])
    found = _parsed[key]
    if isinstance(found, SyntaxError):
        raise found
    tree = pickle.loads(found)
    assert isinstance(tree, ast.Module)
    return tree
