"""Before a host starts: can it use this home, and is `bind_host` an address of this machine?

Each problem is one error naming the folder, file or setting and what to do,
so `cadre-desktop --headless` prints one line and exits 1 instead of a
traceback or a hang:

- a folder of the home that is not a folder, cannot be created, or cannot be
  written in (a read-only disk, someone else's folder);
- something other than a regular file where a file of the home belongs (a
  FIFO would hang a read, a folder would fail a write later);
- a `bind_host` this machine does not have (which used to surface much later
  as "no free ports").

It also makes the home's folders private (0700): an older build left them 0755.
"""

from __future__ import annotations

import errno
import os
import secrets
import socket
import stat
from pathlib import Path

from cadre_desktop.errors import SettingsError, StorageError
from cadre_desktop.files.atomicfile import ensure_private_dir
from cadre_desktop.files.readfile import kind_of
from cadre_desktop.paths import Paths

_WILDCARDS = ("0.0.0.0", "::", "", "*")


def prepare_home(paths: Paths) -> None:
    """Raise StorageError if the home cannot be used; make its folders private."""
    for folder, what in ((paths.data_dir, "home folder"), (paths.log_dir, "log folder")):
        _usable_folder(folder, what)
    files = (
        (paths.records_file, "records file"), (paths.state_file, "state file"),
        (paths.control_file, "control file"), (paths.lock_file, "lock file"),
        (paths.settings_file, "settings file"), (paths.host_log, "host log"),
    )
    for path, what in files:
        _regular_or_absent(path, what)
    _folder_or_absent(paths.nodes_dir, "nodes folder")


def _usable_folder(folder: Path, what: str) -> None:
    try:
        st = folder.stat()
    except FileNotFoundError:
        try:
            ensure_private_dir(folder)
        except OSError as exc:
            raise StorageError(f"cannot create the {what} {folder}: {exc.strerror or exc}. "
                               "Make its parent writable, or set CADRE_DESKTOP_HOME to another folder.") from None
    except OSError as exc:
        raise StorageError(f"cannot use the {what} {folder}: {exc.strerror or exc}") from None
    else:
        if not stat.S_ISDIR(st.st_mode):
            raise StorageError(f"the {what} {folder} is {kind_of(st.st_mode)}, not a folder; "
                               "move it away or set CADRE_DESKTOP_HOME to another folder")
    # The name of an interrupted atomic write, so a crash right here leaves nothing the
    # next start does not clear (jsondoc.remove_interrupted_writes).
    probe = folder / f".write-check.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        why = "it is on a read-only disk" if exc.errno == errno.EROFS else (exc.strerror or str(exc))
        raise StorageError(f"cannot write in the {what} {folder}: {why}. cadre-desktop keeps its files "
                           "there; make it writable or set CADRE_DESKTOP_HOME to another folder.") from None
    try:
        ensure_private_dir(folder, tighten=True)
    except OSError:
        pass  # not ours to change (shared by an administrator): it is writable, which is what we need


def _regular_or_absent(path: Path, what: str) -> None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"cannot use the {what} {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise StorageError(f"the {what} {path} is {kind_of(st.st_mode)}, not a file; it was left as it is. "
                           "Move it away and start again.")


def _folder_or_absent(folder: Path, what: str) -> None:
    try:
        st = folder.stat()
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise StorageError(f"the {what} {folder} is {kind_of(st.st_mode)}, not a folder; move it away")


def machine_addresses() -> list[str]:
    import psutil

    found = []
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family in (socket.AF_INET, socket.AF_INET6):
                found.append(entry.address.split("%")[0])
    return sorted(set(found), key=lambda a: (":" in a, a))


def check_bind_host(host: str, source: str) -> None:
    """Raise SettingsError unless this machine can listen on `host`."""
    if host in _WILDCARDS:
        return
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise SettingsError(f"{source}: setting 'bind_host' {host!r} is not an address of this computer "
                            "(the name does not resolve); use one of its addresses, or \"0.0.0.0\" for all") from None
    for family, _type, _proto, _name, addr in infos:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(addr)
                return
            except OSError:
                continue
    ours = machine_addresses()
    listed = ", ".join(ours[:8]) + (", ..." if len(ours) > 8 else "")
    raise SettingsError(f"{source}: setting 'bind_host' {host!r} is not an address of this computer "
                        f"(its addresses: {listed}); use one of them, or \"0.0.0.0\" to listen on all")
