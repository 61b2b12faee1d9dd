"""Where `--version` gets the build's commit: the file a bundle carries, else git, else "unknown"."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cadre_desktop import BUILD_FILE, UNKNOWN_COMMIT, build_commit


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
                          capture_output=True, text=True, check=True, timeout=30).stdout.strip()


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A git checkout with a package folder in it, as this repository is laid out."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("x = 1\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "first")
    return tmp_path


def test_a_bundle_reports_the_commit_recorded_at_build_time(tmp_path):
    (tmp_path / BUILD_FILE).write_text(json.dumps({"commit": "1a2b3c4d5e6f"}))
    assert build_commit(tmp_path) == "1a2b3c4d5e6f"


@pytest.mark.parametrize("content", [
    json.dumps({"commit": "1a2b3c\n4d5e6f"}), json.dumps({"commit": "\x1b[31mred"}), json.dumps({"commit": 42}),
    json.dumps(["1a2b3c4d5e6f"]), json.dumps({"commit": "f" * 41}), "{not json",
])
def test_a_recorded_commit_that_is_not_a_commit_is_unknown(tmp_path, content):
    (tmp_path / BUILD_FILE).write_text(content)
    assert build_commit(tmp_path) == UNKNOWN_COMMIT


def test_a_checkout_reports_its_head_and_says_when_tracked_files_changed(checkout):
    head = git(checkout, "rev-parse", "--short=12", "HEAD")
    assert build_commit(checkout / "pkg") == head
    (checkout / "untracked.txt").write_text("not ours")
    assert build_commit(checkout / "pkg") == head  # untracked files do not make a build dirty
    (checkout / "pkg" / "__init__.py").write_text("x = 2\n")
    assert build_commit(checkout / "pkg") == f"{head}-dirty"


def test_the_recorded_commit_wins_over_the_checkout(checkout):
    (checkout / "pkg" / BUILD_FILE).write_text(json.dumps({"commit": "abcdef1"}))
    assert build_commit(checkout / "pkg") == "abcdef1"


def test_without_git_or_a_checkout_the_commit_is_unknown(checkout, tmp_path, monkeypatch):
    bare = tmp_path / "unpacked" / "pkg"
    bare.mkdir(parents=True)
    assert build_commit(bare) == UNKNOWN_COMMIT
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))
    assert build_commit(checkout / "pkg") == UNKNOWN_COMMIT
