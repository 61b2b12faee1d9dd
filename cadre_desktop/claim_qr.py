"""The claim QR code: one rendering for the terminal, PNG and SVG files.

Always a full QR code (never a Micro QR, which phone cameras do not read),
medium error correction, and the claim URL exactly as the host gave it. Files
are written 0600 through the atomic writer: the code carries the claim secret.
"""

from __future__ import annotations

import io
from pathlib import Path

import segno

from cadre_desktop.files.atomicfile import write_bytes_atomic

KINDS = ("png", "svg")


def make(url: str) -> segno.QRCode:
    return segno.make_qr(url, error="m", boost_error=False)


def terminal_text(url: str) -> str:
    """Half-block characters, light modules drawn, so it scans on a dark terminal too."""
    out = io.StringIO()
    make(url).terminal(out=out, compact=True)
    return out.getvalue()


def image_bytes(url: str, kind: str, *, scale: int = 8) -> bytes:
    if kind not in KINDS:
        raise ValueError(f"unknown image kind {kind!r}")
    out = io.BytesIO()
    make(url).save(out, kind=kind, scale=scale, border=4)
    return out.getvalue()


def write_image(url: str, path: Path, kind: str) -> None:
    write_bytes_atomic(Path(path), image_bytes(url, kind), mode=0o600)
