"""resources/ is the source of the icons and the packaging templates; what is built from it is current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "resources" / "build.py"


def test_every_built_file_matches_its_sources():
    out = subprocess.run([sys.executable, str(BUILD), "--check"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_each_tray_state_has_four_variants_and_dark_ones_are_derived(tmp_path):
    sys.path.insert(0, str(BUILD.parent))
    try:
        import build  # noqa: PLC0415 - resources/build.py, not a package
    finally:
        sys.path.remove(str(BUILD.parent))
    built = {path.name: text for path, text in build.targets().items()}
    for state in build.STATES:
        assert {f"{state}-{v}.svg" for v in ("light", "dark", "mono-light", "mono-dark")} <= set(built)
        assert built[f"{state}-dark.svg"] != built[f"{state}-light.svg"]
        assert "#1b1f24" not in built[f"{state}-mono-dark.svg"]  # a dark panel never gets dark ink
    assert build.recolour("#1b1f24 #ffffff", build.DARK) == "#ffffff #ffffff"  # never mapped twice


def test_the_packaging_files_are_filled_from_one_name_and_id():
    desktop = (REPO / "packaging" / "linux" / "cadre-desktop.desktop").read_text()
    metainfo = (REPO / "packaging" / "linux" / "org.cadre.desktop.metainfo.xml").read_text()
    plist = (REPO / "packaging" / "macos" / "Info.plist").read_text()
    assert "Name=cadre-desktop" in desktop and "Exec=cadre-desktop" in desktop and "@" not in desktop
    assert "<id>org.cadre.desktop</id>" in metainfo and "cadre-desktop.desktop</launchable>" in metainfo
    assert "<string>cadre-desktop</string>" in plist and "@" not in plist + metainfo
