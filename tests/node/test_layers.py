"""The node stands alone: no host, no UI, no Qt; and it starts light."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC
from pathlib import Path

import pytest

from tests.support.imports import loaded_after
from tests.support.node_process import REPO_ROOT, NodeLauncher


def run_python(script: str) -> subprocess.CompletedProcess[str]:
    """`script` in a fresh interpreter from the repository root (its own modules, nothing preloaded)."""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, timeout=30)


def loaded_by(modules: list[str], names: tuple[str, ...]) -> list[str]:
    """The modules in `names` (or inside them) that importing `modules` loads, in a fresh interpreter."""
    return loaded_after(f"import importlib\nfor name in {modules!r}: importlib.import_module(name)", names)


MODULES = [
    "cadre_desktop.node.__main__",
    "cadre_desktop.node.server",
    "cadre_desktop.node.cadre.joiner",
    "cadre_desktop.node.cadre.invitations",
]


def test_node_imports_nothing_from_host_ui_or_qt() -> None:
    assert loaded_by(MODULES, ("PySide6", "shiboken6", "qasync", "cadre_desktop.host", "cadre_desktop.ui",
                               "keyring")) == []


def test_the_import_check_sees_what_a_module_loads() -> None:
    assert loaded_by(["cadre_desktop.host.core.records.records"], ("cadre_desktop.host",)) != []


def test_an_ordinary_start_does_not_load_cryptography() -> None:
    # cryptography is needed only to create a key or sign; a restart reads both
    # raw keys from the identity file.
    assert loaded_by(["cadre_desktop.node.server", "cadre_desktop.node.identity"], ("cryptography",)) == []


def test_a_first_start_makes_its_key_without_keeping_cryptography_loaded(tmp_path) -> None:
    # Creating the identity needs the library; on POSIX a forked child makes the key,
    # so the node does not carry the library for the rest of its life.
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from cadre_desktop.node.identity import load_or_create_identity\n"
        f"first = load_or_create_identity(Path({str(tmp_path)!r}))\n"
        "loaded = 'cryptography' in sys.modules\n"
        f"again = load_or_create_identity(Path({str(tmp_path)!r}))\n"
        "assert again == first, 'the created identity did not read back'\n"
        "sig = first.sign(b'm')\n"
        "from cadre_desktop.wire.keys import verify_signature\n"
        "assert verify_signature(first.public_key, sig, b'm'), 'the two keys do not belong together'\n"
        "print(loaded)\n"
    )
    result = run_python(script)
    assert result.returncode == 0, result.stderr
    expected = "False" if sys.platform.startswith("linux") else result.stdout.strip()
    assert result.stdout.strip() == expected


def test_without_fork_the_key_is_made_in_process(tmp_path, monkeypatch) -> None:
    from cadre_desktop.node import identity
    from cadre_desktop.wire.keys import verify_signature

    monkeypatch.setattr(identity, "_can_fork", lambda: False)  # Windows, macOS
    made = identity.load_or_create_identity(tmp_path)
    assert verify_signature(made.public_key, made.sign(b"m"), b"m")
    assert identity.load_or_create_identity(tmp_path) == made


def test_a_key_child_that_dies_falls_back_to_making_it_in_process(tmp_path, monkeypatch) -> None:
    import os

    from cadre_desktop.node import identity
    from cadre_desktop.wire.keys import verify_signature

    real, parent = identity._generate, os.getpid()

    def generate():
        if os.getpid() != parent:
            raise MemoryError("the forked child cannot")
        return real()

    monkeypatch.setattr(identity, "_generate", generate)
    if not identity._can_fork():
        return
    made = identity.load_or_create_identity(tmp_path)
    assert verify_signature(made.public_key, made.sign(b"m"), b"m")


def test_the_node_program_never_imports_aiohttp() -> None:
    # Its server is h11 on asyncio streams, and so is the one request it makes (redeeming
    # an invitation); aiohttp cost every node ~95 ms of start-up and ~12 MB.
    assert loaded_by(["cadre_desktop.node.__main__", "cadre_desktop.node.server", "cadre_desktop.node.cadre.joiner"],
                     ("aiohttp", "yarl", "multidict")) == []


def test_asyncio_is_imported_without_ssl_and_ssl_still_imports_afterwards() -> None:
    script = (
        "from cadre_desktop.net.plainasync import import_without_openssl\n"
        "assert import_without_openssl()\n"
        "import sys, asyncio.base_events, asyncio.selector_events\n"
        "assert 'ssl' not in sys.modules, 'asyncio loaded ssl'\n"
        "assert asyncio.base_events.ssl is None and asyncio.selector_events.ssl is None\n"
        "import ssl\n"
        "print(ssl.SSLContext.__name__)\n"
    )
    result = run_python(script)
    assert result.stdout.strip() == "SSLContext", result.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/maps")
async def test_a_running_node_maps_neither_aiohttp_nor_openssls_libraries(nodes: NodeLauncher) -> None:
    node = await nodes.start("light-1")
    await node.claim("family")  # a request or two through every layer first
    assert node.proc is not None
    maps = Path(f"/proc/{node.proc.pid}/maps").read_text()
    libraries = {line.rsplit("/", 1)[-1] for line in maps.splitlines() if "/" in line}
    assert not [name for name in libraries if "aiohttp" in name
                or name.startswith(("libssl", "_ssl", "libcrypto", "_hashlib"))], libraries


def test_api_times_are_iso_utc_with_seconds_as_datetime_would_write_them() -> None:
    from datetime import datetime

    from cadre_desktop.node.clock import iso_utc

    for epoch in (0, 1_700_000_000, 1_700_000_000.999, 4_102_444_800):
        expected = datetime.fromtimestamp(int(epoch), UTC).isoformat(timespec="seconds")
        assert iso_utc(epoch) == expected.replace("+00:00", "Z")
