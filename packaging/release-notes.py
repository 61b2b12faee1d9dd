"""Release notes and AppStream release entries from CHANGELOG.md (Keep a Changelog form).

    python packaging/release-notes.py VERSION           the notes of VERSION ("v0.2.0", a tag, works too)
    python packaging/release-notes.py --tag TAG         the same, and TAG must be v<cadre_desktop.__version__>
    python packaging/release-notes.py --metainfo FILE   FILE (AppStream metainfo) with <releases/> filled in
                                                        from every dated version of the changelog

A version's section is the text under its heading (`## [0.2.0] - 2026-12-01`) up to the
next `## ` heading, without link definitions. A version with no section, or an empty one,
exits 1 with a message: a release without notes is a mistake caught before publishing.
Standard library only, so it runs before any venv exists (the release workflow).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

ROOT = Path(__file__).resolve().parent.parent
CHANGELOG = ROOT / "CHANGELOG.md"
HEADING = re.compile(r"^## +\[?(?P<version>[^\]\s]+)\]?(?: +- +(?P<date>\d{4}-\d{2}-\d{2}))?\s*$")
LINK_DEFINITION = re.compile(r"^\[[^\]]+\]: +\S+")
VERSION_LINE = re.compile(r'^__version__ = "([^"]+)"', re.MULTILINE)


class NotesError(Exception):
    """The changelog cannot give what was asked; the message says what to fix."""


@dataclass(frozen=True)
class Section:
    version: str
    date: str | None
    body: str


def sections(text: str) -> list[Section]:
    """Every `## ` section of a changelog, in file order."""
    found: list[Section] = []
    heading: re.Match | None = None
    lines: list[str] = []

    def close() -> None:
        if heading is not None:
            body = "\n".join(line for line in lines if not LINK_DEFINITION.match(line)).strip()
            found.append(Section(heading["version"], heading["date"], body))

    for line in text.splitlines():
        if line.startswith("## "):
            close()
            heading, lines = HEADING.match(line), []
            if heading is None:
                raise NotesError(f"not a version heading: {line.strip()!r} (want '## [1.2.3] - YYYY-MM-DD')")
        elif heading is not None:
            lines.append(line)
    close()
    return found


def notes(text: str, version: str) -> str:
    """The body of `version`'s section; `v1.2.3` is taken as `1.2.3`."""
    version = version.removeprefix("v")
    for section in sections(text):
        if section.version == version:
            if not section.body:
                raise NotesError(f"the section of {version} in CHANGELOG.md is empty")
            return section.body + "\n"
    raise NotesError(f"CHANGELOG.md has no section for {version} (rename [Unreleased] to "
                     f"'[{version}] - YYYY-MM-DD' when releasing it)")


def check_tag(tag: str, source_version: str) -> str:
    """The version a release tag names; it must be the version the code says it is."""
    if not re.fullmatch(r"v\d+\.\d+\.\d+\S*", tag):
        raise NotesError(f"{tag!r} is not a version tag (want v1.2.3)")
    if tag[1:] != source_version:
        raise NotesError(f"tag {tag} does not match __version__ {source_version} in cadre_desktop/__init__.py")
    return tag[1:]


def metainfo(template: str, text: str) -> str:
    """The metainfo template with `<releases/>` replaced by every dated version, newest first."""
    if "<releases/>" not in template:
        raise NotesError("the metainfo template has no <releases/> to fill")
    dated = [s for s in sections(text) if s.date]
    entries = "".join(f"\n    <release version={quoteattr(s.version)} date={quoteattr(s.date)}/>" for s in dated)
    return template.replace("<releases/>", f"<releases>{entries}\n  </releases>" if dated else "<releases/>")


def source_version() -> str:
    match = VERSION_LINE.search((ROOT / "cadre_desktop" / "__init__.py").read_text(encoding="utf-8"))
    if match is None:
        raise NotesError("no __version__ line in cadre_desktop/__init__.py")
    return match[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="release-notes.py", description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("version", nargs="?", help="the version whose notes to print")
    what.add_argument("--tag", help="a release tag; must match cadre_desktop.__version__")
    what.add_argument("--metainfo", type=Path, metavar="FILE", help="fill FILE's <releases/> and print it")
    parser.add_argument("--changelog", type=Path, default=CHANGELOG, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        text = args.changelog.read_text(encoding="utf-8")
        if args.metainfo:
            sys.stdout.write(metainfo(args.metainfo.read_text(encoding="utf-8"), text))
        else:
            version = check_tag(args.tag, source_version()) if args.tag else args.version
            sys.stdout.write(notes(text, version))
    except (NotesError, OSError) as exc:
        print(f"release-notes.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
