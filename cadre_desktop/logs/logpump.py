"""The log pump: writes one node's output into its log, holding the log under its cap as it writes.

Why a process of its own. A node must outlive the host that started it (a
crash, `keep_nodes_running_on_quit`) and be re-attached by the next host. If
the host read the node's output through a pipe, the host's death would break
that pipe, and no later host could ever reconnect to it. If the node wrote
straight into the file (as before), nothing could bound the file between two
sweeps: a node writing 10 MB/s filled 600 MB. So each node child gets a pump:
the host makes a pipe, gives its write end to the node as stdout and stderr,
and its read end to this program, which outlives the host exactly as the node
does and ends when the node's last process closes its output (end of file).

What it does with each chunk read (at most 64 KiB): if the chunk does not fit
under the cap, it ends the current file at a line break, renames it to
`<log>.1` (replacing the older one) and starts a fresh file, so the log and
its one rotation each stay under the cap and both together under twice the
cap. Files are created 0600. Writes are whole chunks under an exclusive
`flock`, so a pump still draining a dead node's last lines and the pump of its
respawn never push the file past the cap together. A full disk drops output
rather than blocking the node.

Its cost, per node (measured on the 2-core test VM): one more process, about
10 MB resident (standard library only, started with `-I -S`); one pipe; and a
copy of every byte the node writes through user space (a few syscalls per
64 KiB: 600 MB went through in under 2 s). The node is started first and its
pump right after, so a respawned child starts as early as before; the host's
own `spawn()` takes longer while the pump's Python starts (about 2 ms before,
10 to 14 ms on the loaded VM, most of it file syncs slowed by the new process).
Termination signals are ignored: a pump ends only with its node's output, so
a Ctrl-C in the host's terminal or a SIGTERM to the node's group never cuts
off the node's last lines.

On Windows the pump also holds the node's Job object open (see
`cadre_desktop.host.local.system.winjob`), so the job lives exactly as long as the node's
output does and not as long as the host.

Usage: `python -I -S logpump.py <log path> <cap bytes> [--job <name>]`, the
node's output on stdin. Inside a bundle: `cadre-desktop --log-pump ...`.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys

CHUNK = 64 * 1024
#: How a bundle's executable is told to be a log pump (cli.py dispatches it).
FLAG = "--log-pump"
_POSIX = os.name == "posix"


def _lock(fd: int) -> None:
    if _POSIX:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)


def _unlock(fd: int) -> None:
    if _POSIX:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_UN)


class CappedLog:
    """An append-only log file that never grows past `cap` bytes; the old part moves to `.1`."""

    def __init__(self, path: str, cap: int) -> None:
        self.path = path
        self.rotated = path + ".1"
        self.cap = max(1, cap)
        self.fd = -1
        self._open()

    def _open(self) -> None:
        # O_NONBLOCK: a FIFO put where the log belongs must not hang the pump (and
        # with it the node, whose output would back up); only a regular file will do.
        flags = (os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
        fd = os.open(self.path, flags, 0o600)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, f"{self.path} is not a regular file")
        if _POSIX:
            os.set_blocking(fd, True)
            os.fchmod(fd, 0o600)  # a file an older build left 0644
        self.fd = fd

    def _current(self) -> bool:
        """Whether our descriptor is still the file at `path` (another pump may have rotated it)."""
        try:
            return os.stat(self.path).st_ino == os.fstat(self.fd).st_ino or not _POSIX
        except OSError:
            return False

    def _rotate(self) -> None:
        os.close(self.fd)
        self.fd = -1
        try:
            os.replace(self.path, self.rotated)
        except OSError:
            # Windows refuses to rename a file another process has open: copy the
            # old part aside and start the same file again from empty.
            self._open()
            self._copy_aside()
            os.ftruncate(self.fd, 0)
            return
        self._open()

    def _copy_aside(self) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0)
        with open(self.path, "rb") as src:
            out = os.open(self.rotated, flags, 0o600)
            try:
                while True:
                    data = src.read(CHUNK)
                    if not data:
                        break
                    os.write(out, data)
            finally:
                os.close(out)

    def write(self, data: bytes) -> None:
        while True:
            self._open_current()
            _lock(self.fd)
            try:
                if not self._current():
                    continue  # rotated under us between the check and the lock; look again
                data = self._write_some(data)
            finally:
                if self.fd >= 0:
                    _unlock(self.fd)
            if not data:
                return

    def _open_current(self) -> None:
        if self.fd < 0 or not self._current():
            if self.fd >= 0:
                os.close(self.fd)
            self._open()

    def _write_some(self, data: bytes) -> bytes:
        """Write what fits (rotating when it does not); return what is left for the fresh file."""
        size = os.fstat(self.fd).st_size
        room = self.cap - size
        if len(data) <= room:
            _write_all(self.fd, data)
            return b""
        if size == 0:
            # A single chunk longer than the whole cap: its end is what matters.
            _write_all(self.fd, data[-self.cap:])
            return b""
        cut = data.rfind(b"\n", 0, max(0, room)) + 1
        if cut:
            _write_all(self.fd, data[:cut])
            data = data[cut:]
        self._rotate()
        return data

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        pass  # a full disk: drop the output rather than block the node


def _hold_job(name: str | None) -> object | None:
    """Windows: keep the node's Job object open for as long as the node writes."""
    if not name or os.name != "nt":
        return None
    import ctypes

    query = 0x0004  # JOB_OBJECT_QUERY: enough to keep it open
    return ctypes.windll.kernel32.OpenJobObjectW(query, False, name) or None  # type: ignore[attr-defined]


def pump(source: int, log: CappedLog) -> None:
    while True:
        try:
            data = os.read(source, CHUNK)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        try:
            log.write(data)
        except OSError:
            pass  # the folder went away (a Remove); keep draining so the node never blocks


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 4) or not argv[1].isdigit() or (len(argv) == 4 and argv[2] != "--job"):
        print("usage: logpump <log path> <cap bytes> [--job <name>]", file=sys.stderr)
        return 2
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN)
    job = _hold_job(argv[3] if len(argv) == 4 else None)  # noqa: F841 - held until exit
    try:
        log = CappedLog(argv[0], int(argv[1]))
    except OSError as exc:
        print(f"logpump: cannot open {argv[0]}: {exc}", file=sys.stderr)
        # Drain anyway: a node whose output nobody reads would block on a full pipe.
        while os.read(0, CHUNK):
            pass
        return 1
    try:
        pump(0, log)
    finally:
        log.close()
    return 0


def run(argv: list[str]) -> None:
    """Pump, then end at once: the host tells a node's exit only when its pump has ended
    (the log is whole then), so the interpreter's tidy-up would only delay a respawn."""
    code = main(argv)
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run(sys.argv[1:])
