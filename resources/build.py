"""Build the package data and the packaging files from the sources in resources/.

    python resources/build.py            write every target
    python resources/build.py --check    exit 1, naming them, when a target differs from its sources

Sources (edit these):
  icons/cadre-desktop.svg        the app icon; also what packaging/icons/make_icons.py renders the
                                 Linux PNGs, the Windows .ico and the macOS .icns from
  icons/tray/<state>.svg         a tray icon for light panels, in colour
  icons/tray/<state>-mono.svg    the same in one ink, for the `monochrome_icon` setting
  linux/*.in, macos/*.in         templates: @ID@, @NAME@, @SUMMARY@, @CATEGORIES@ are filled in

Targets (checked in, so an editable install, a wheel and the bundle build find them
where they always were; tests/ui/test_resources.py fails when one is stale):
  cadre_desktop/ui/icons/        app.svg and the 20 tray icons: each state light, dark,
                                 mono-light, mono-dark; a dark variant is its light source
                                 with the dark palette below
  packaging/icons/cadre-desktop.svg, packaging/linux/cadre-desktop.desktop,
  packaging/linux/org.cadre.desktop.metainfo.xml, packaging/macos/Info.plist
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
APP = {"@ID@": "org.cadre.desktop", "@NAME@": "cadre-desktop",
       "@SUMMARY@": "Host cadre nodes on this computer", "@CATEGORIES@": "Network;P2P"}
STATES = ("empty", "joined", "unclaimed", "busy", "error")
#: Light panel colour -> dark panel colour: brighter fills, a light outline.
DARK = {"#1b1f24": "#ffffff", "#6e7781": "#a8b0ba", "#2e9e44": "#3fbf58", "#2f6fd6": "#5b93f0",
        "#c98500": "#f2b01e", "#d93025": "#f0574b"}
#: The one ink of a monochrome icon, for dark panels.
MONO_DARK = {"#1b1f24": "#f5f5f5"}
TEMPLATES = {
    "linux/cadre-desktop.desktop.in": "packaging/linux/cadre-desktop.desktop",
    "linux/org.cadre.desktop.metainfo.xml.in": "packaging/linux/org.cadre.desktop.metainfo.xml",
    "macos/Info.plist.in": "packaging/macos/Info.plist",
}


def recolour(svg: str, palette: dict[str, str]) -> str:
    out = svg
    for i, (old, _new) in enumerate(palette.items()):
        out = out.replace(old, f"\0{i}\0")  # two steps, so a new colour is never mapped again
    for i, (_old, new) in enumerate(palette.items()):
        out = out.replace(f"\0{i}\0", new)
    return out


def fill(template: str) -> str:
    for key, value in APP.items():
        template = template.replace(key, value)
    return template


def targets() -> dict[Path, str]:
    """Every target path and the text it must hold."""
    out: dict[Path, str] = {}
    icons = ROOT / "cadre_desktop" / "ui" / "icons"
    for state in STATES:
        colour = (HERE / "icons" / "tray" / f"{state}.svg").read_text(encoding="utf-8")
        mono = (HERE / "icons" / "tray" / f"{state}-mono.svg").read_text(encoding="utf-8")
        out[icons / f"{state}-light.svg"] = colour
        out[icons / f"{state}-dark.svg"] = recolour(colour, DARK)
        out[icons / f"{state}-mono-light.svg"] = mono
        out[icons / f"{state}-mono-dark.svg"] = recolour(mono, MONO_DARK)
    app_icon = (HERE / "icons" / "cadre-desktop.svg").read_text(encoding="utf-8")
    out[icons / "app.svg"] = app_icon
    out[ROOT / "packaging" / "icons" / "cadre-desktop.svg"] = app_icon
    for source, target in TEMPLATES.items():
        out[ROOT / target] = fill((HERE / source).read_text(encoding="utf-8"))
    return out


def stale() -> list[Path]:
    found = []
    for path, text in targets().items():
        try:
            same = path.read_text(encoding="utf-8") == text
        except FileNotFoundError:
            same = False
        if not same:
            found.append(path)
    return found


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        old = stale()
        for path in old:
            print(f"stale: {path.relative_to(ROOT)} (run python resources/build.py)", file=sys.stderr)
        return 1 if old else 0
    if argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    for path, text in targets().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
