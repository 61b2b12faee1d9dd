"""Render the app icon (cadre-desktop.svg) to what each OS wants, at build time.

    python packaging/icons/make_icons.py OUT_DIR

writes into OUT_DIR: `png/<size>.png` (the Linux hicolor sizes), `cadre-desktop.ico`
(Windows: PNG frames in an ICO container, Vista and later read them) and
`cadre-desktop.icns` (macOS: PNG frames in an ICNS container). The SVG is the one
source; nothing binary is kept in the repository. Qt (already in the build venv)
renders it, offscreen, so no display and no image tool is needed.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

SVG = Path(__file__).with_name("cadre-desktop.svg")
LINUX_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# ICNS types that hold PNG data, by pixel size (the @2x types share a size).
ICNS_TYPES = ((b"icp4", 16), (b"icp5", 32), (b"icp6", 64), (b"ic07", 128), (b"ic08", 256),
              (b"ic09", 512), (b"ic10", 1024), (b"ic11", 32), (b"ic12", 64), (b"ic13", 256),
              (b"ic14", 512))


def render(sizes) -> dict[int, bytes]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication([])  # noqa: F841 (fonts, image plugins)
    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        raise SystemExit(f"cannot render {SVG}")
    out = {}
    for size in sorted(set(sizes)):
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        data = QByteArray()
        buffer = QBuffer(data)
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        image.save(buffer, "PNG")
        buffer.close()
        out[size] = bytes(data)
    return out


def ico(pngs: dict[int, bytes]) -> bytes:
    sizes = sorted(pngs)
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = 6 + 16 * len(sizes)
    entries, blobs = b"", b""
    for size in sizes:
        blob = pngs[size]
        side = 0 if size >= 256 else size  # 0 means 256 in an ICO directory entry
        entries += struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(blob), offset)
        blobs += blob
        offset += len(blob)
    return header + entries + blobs


def icns(pngs: dict[int, bytes]) -> bytes:
    chunks = b"".join(kind + struct.pack(">I", 8 + len(pngs[size])) + pngs[size] for kind, size in ICNS_TYPES)
    return b"icns" + struct.pack(">I", 8 + len(chunks)) + chunks


def main(out_dir: str) -> int:
    out = Path(out_dir)
    (out / "png").mkdir(parents=True, exist_ok=True)
    pngs = render(LINUX_SIZES + ICO_SIZES + tuple(size for _, size in ICNS_TYPES))
    for size in LINUX_SIZES:
        (out / "png" / f"{size}.png").write_bytes(pngs[size])
    (out / "cadre-desktop.ico").write_bytes(ico({s: pngs[s] for s in ICO_SIZES}))
    (out / "cadre-desktop.icns").write_bytes(icns(pngs))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} OUT_DIR")
    sys.exit(main(sys.argv[1]))
