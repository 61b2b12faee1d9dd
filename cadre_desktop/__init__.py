"""cadre-desktop: host cadre nodes on a home computer, from the system tray."""

from __future__ import annotations

from pathlib import Path

__version__ = "0.2.0"  # the one version source: pyproject, the bundles and the .deb read it
APP_NAME = "cadre-desktop"

#: Written beside this file inside a bundle by packaging/cadre-desktop.spec; never in git.
BUILD_FILE = "_build.json"
UNKNOWN_COMMIT = "unknown"
_GIT_TIMEOUT_S = 5


def build_commit(package_dir: Path | None = None) -> str:
    """The commit this program was built from, for `--version` and bug reports.

    A bundle (hence the .deb) carries it in `_build.json`, written at build time.
    Run from a git checkout, it is the checkout's HEAD, `-dirty` when tracked files
    changed. Anything else, or anything that does not look like a commit, is
    "unknown": this runs on every `--version`, so it never raises. `package_dir` is
    this package's folder unless a test names another.
    """
    here = package_dir or Path(__file__).resolve().parent
    recorded = _recorded_commit(here / BUILD_FILE)
    if recorded is not None:
        return recorded
    if (here.parent / ".git").exists():  # a folder in a clone, a file in a worktree
        return _git_commit(here.parent)
    return UNKNOWN_COMMIT


def valid_commit(text: object) -> bool:
    import re

    return isinstance(text, str) and re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", text) is not None


def _recorded_commit(path: Path) -> str | None:
    import json

    try:
        with open(path, "rb") as file:
            doc = json.loads(file.read(4096))
    except (OSError, ValueError):
        return None
    commit = doc.get("commit") if isinstance(doc, dict) else None
    return commit if valid_commit(commit) else UNKNOWN_COMMIT


def _git_commit(root: Path) -> str:
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                              stdin=subprocess.DEVNULL, timeout=_GIT_TIMEOUT_S).stdout.strip()
    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        if git("status", "--porcelain", "--untracked-files=no"):
            commit += "-dirty"
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN_COMMIT
    return commit if valid_commit(commit) else UNKNOWN_COMMIT
