"""The real headless host with two fault hooks, for crash and full-disk tests.

Run as a program (`python tests/support/instrumented_host.py`), it is exactly
`cadre-desktop --headless` plus, chosen by environment variables naming a
trigger file:

CADRE_TEST_STALL_SPAWN=<file>
    While <file> exists, the orchestrator's write of state.json that first
    names a new child never happens: the host writes <file>.stalled and hangs
    there, with the child already started. A test SIGKILLs it in that window.
CADRE_TEST_FULL_DISK=<file>
    While <file> exists, every write into a temp file of an atomic save (the
    records, state.json, control.json) fails with ENOSPC, as on a full disk;
    each such write appends the saved file's name and the thread that wrote it
    (`name thread`, a line each) to <file>.writes.

`InstrumentedHost` is the HeadlessHost that runs it.
"""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.headless import HeadlessHost  # noqa: E402
from tests.support.polling import wait_until  # noqa: E402

STALL_ENV = "CADRE_TEST_STALL_SPAWN"
FULL_ENV = "CADRE_TEST_FULL_DISK"


class InstrumentedHost(HeadlessHost):
    def start(self, wait: bool = True) -> InstrumentedHost:
        self.stderr_path = self.home / f"host-stderr-{random.getrandbits(32):08x}.txt"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, __file__], env=self.env, stdout=subprocess.DEVNULL, stderr=self._stderr,
            cwd=self.home,
        )
        if wait:
            wait_until(self._ready, timeout=30, interval=0.02, what="instrumented host control.json")
        return self


def _install_stall(trigger: Path) -> None:
    from cadre_desktop.host.local import handles as state_module  # where state.json is written

    patched: Any = state_module  # a name it imported, not one it exports: patched where it is looked up
    real = patched.write_json_atomic
    known: set[str] = set()

    def write(path, doc, **kw):
        handles = set(doc.get("handles", {})) if path.name == "state.json" else set()
        if handles - known and trigger.exists():
            Path(f"{trigger}.stalled").write_text(",".join(sorted(handles - known)))
            threading.Event().wait()  # hang here, child started, until SIGKILLed
        real(path, doc, **kw)
        known.update(handles)

    patched.write_json_atomic = write


def _install_full_disk(trigger: Path) -> None:
    real = os.write

    def write(fd, data):
        if trigger.exists():
            try:
                name = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                name = ""
            base = os.path.basename(name)
            if base.startswith(".") and base.endswith(".tmp"):
                with open(f"{trigger}.writes", "a") as seen:
                    seen.write(f"{base} {threading.current_thread().name}\n")
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    os.write = write


def main() -> int:
    if os.environ.get(STALL_ENV):
        _install_stall(Path(os.environ[STALL_ENV]))
    if os.environ.get(FULL_ENV):
        _install_full_disk(Path(os.environ[FULL_ENV]))
    from cadre_desktop.cli import main as cli_main

    return cli_main(["--headless"])


if __name__ == "__main__":
    sys.exit(main())
