"""Start the tray app at login: XDG autostart on Linux, a LaunchAgent on macOS, HKCU Run on Windows.

No Qt here, so `cadre-desktop autostart on|off|status` stays light. Each
platform's branch is a small class whose file location, command and registry
module come in as arguments, so every branch is tested on Linux.
`enable()`, `disable()` and `status()` at module level use this computer's.

The entry starts the `cadre-desktop` command installed with the running Python
(`launch_command`), which outlives the folder the app was started from, and names
an icon that is there (`icon_for_entry`). It carries what the running app needs
to find the same nodes at login:
`CADRE_DESKTOP_HOME` (made absolute), the keyring backend, and the XDG data and
state folders platformdirs reads when no home is set. `status()` is True when the entry
starts this app as it runs now, False when there is none, and a sentence when
one exists but starts something else (another Python, another home).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path, PureWindowsPath
from typing import Any

from cadre_desktop import APP_NAME
from cadre_desktop.errors import MachineError
from cadre_desktop.files.atomicfile import write_bytes_atomic

LABEL = "org.cadre.desktop"
RUN_KEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
#: What the app started at login needs in its environment to find this home's nodes.
CARRIED = ("CADRE_DESKTOP_HOME", "PYTHON_KEYRING_BACKEND")
#: platformdirs' folders, carried only when no home is set (a home holds everything).
#: XDG_CONFIG_HOME is not: a session that finds the entry there has that one already.
CARRIED_WITHOUT_HOME = ("XDG_DATA_HOME", "XDG_STATE_HOME")


def carried_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    names = CARRIED if env.get("CADRE_DESKTOP_HOME") else CARRIED + CARRIED_WITHOUT_HOME
    out = {name: env[name] for name in names if env.get(name)}
    if "CADRE_DESKTOP_HOME" in out:
        out["CADRE_DESKTOP_HOME"] = str(Path(out["CADRE_DESKTOP_HOME"]).expanduser().absolute())
    return out


def _elsewhere(found: str, expected: str) -> str:
    return (f"on, but the entry starts `{found}`, not this app (`{expected}`); "
            "`cadre-desktop autostart on` points it here")


class AutostartError(MachineError):
    code = "autostart_failed"


def installed_command(executable: str, path: str | None = None) -> str | None:
    """The `cadre-desktop` command installed with this Python (pip, pipx, a .deb): on PATH when it
    leads to this interpreter's folder, else beside the interpreter. It outlives the folder the
    app happened to be started from, and carries its own interpreter."""
    here = Path(executable).parent
    on_path = shutil.which(APP_NAME, path=path)
    if on_path and Path(on_path).resolve().parent in (here, here.resolve()):
        return on_path
    beside = here / APP_NAME
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def launch_command(*, frozen: bool | None = None, executable: str | None = None,
                   platform: str | None = None, path: str | None = None) -> list[str]:
    """What starts the tray app: the bundle itself when frozen, else the `cadre-desktop` command
    installed with this Python, else this Python with `-m cadre_desktop`."""
    frozen = getattr(sys, "frozen", False) if frozen is None else frozen
    executable = executable or sys.executable
    windows = (platform or sys.platform) == "win32"
    if frozen:
        exe = PureWindowsPath(executable) if windows else Path(executable)
        if windows and exe.name.lower() == "cadre-desktop-cli.exe":
            # The console twin would open a console window at every login.
            return [str(exe.with_name("cadre-desktop.exe"))]
        return [executable]
    if windows:
        # pythonw.exe opens no console window at login (the installed script is a console one).
        windowed = Path(executable).with_name("pythonw.exe")
        if Path(executable).name.lower() == "python.exe" and windowed.exists():
            executable = str(windowed)
        return [executable, "-m", "cadre_desktop"]
    command = installed_command(executable, path)
    return [command] if command else [executable, "-m", "cadre_desktop"]


#: The app's icon in the package (the theme's name is used only where it is installed).
PACKAGE_ICON = Path(__file__).resolve().parent / "ui" / "icons" / "app.svg"


def icon_for_entry(env: Mapping[str, str] | None = None) -> str:
    """The Icon= of a desktop entry: the theme's `cadre-desktop` where a package or the install
    script put it in an icon folder, else the package's own file (a name nothing installed shows
    no icon)."""
    env = os.environ if env is None else env
    data_home = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME", str(Path.home()))) / ".local" / "share")
    data_dirs = (env.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share").split(":")
    for base in [data_home, *data_dirs]:
        if base and (Path(base) / "icons" / "hicolor" / "scalable" / "apps" / f"{APP_NAME}.svg").is_file():
            return APP_NAME
    return str(PACKAGE_ICON) if PACKAGE_ICON.is_file() else APP_NAME


def _failed(doing: str, exc: OSError) -> AutostartError:
    return AutostartError(f"Could not {doing}: {exc.strerror or exc}")


def _delete(path: Path) -> str:
    try:
        path.unlink()
    except FileNotFoundError:
        return f"{path} was not there"
    except OSError as exc:
        raise _failed(f"delete {path}", exc) from None
    return f"deleted {path}"


# -- Linux and other XDG desktops -------------------------------------------------------

def desktop_exec(command: list[str]) -> str:
    """Quote arguments as the Desktop Entry spec's Exec key wants them.

    Two levels: an argument with a reserved character is double-quoted with `"`
    `` ` `` `$` `\\` backslash-escaped, then the value as a whole gets the string
    escape (every backslash doubled) and `%` is doubled (field codes).
    """
    def quote(arg: str) -> str:
        if arg and not any(c in arg for c in " \t\n\"'\\><~|&;$*?#()`="):
            return arg
        escaped = "".join("\\" + c if c in '"`$\\' else c for c in arg)
        return f'"{escaped}"'
    return " ".join(quote(a) for a in command).replace("\\", "\\\\").replace("%", "%%")


class _LoginFile:
    """A login item that is one file (XDG and macOS): written whole (0644, atomically), deleted to turn off."""

    path: Path

    def content(self) -> bytes:
        raise NotImplementedError

    def enable(self) -> str:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(self.path, self.content(), mode=0o644)
        except OSError as exc:
            raise _failed(f"write {self.path}", exc) from None
        return f"wrote {self.path}"

    def disable(self) -> str:
        return _delete(self.path)


class XdgAutostart(_LoginFile):
    def __init__(self, command: list[str], env: Mapping[str, str] | None = None,
                 carried: dict[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        config = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", str(Path.home()))) / ".config")
        self.path = Path(config) / "autostart" / f"{APP_NAME}.desktop"
        self.command = command
        self.carried = dict(carried or {})
        self.icon = icon_for_entry(env)

    def exec_line(self) -> str:
        prefix = ["env", *(f"{k}={v}" for k, v in self.carried.items())] if self.carried else []
        return desktop_exec(prefix + list(self.command))

    def entry(self) -> str:
        return (
            "[Desktop Entry]\n"
            "Type=Application\n"
            f"Name={APP_NAME}\n"
            "Comment=Host cadre nodes on this computer\n"
            f"Exec={self.exec_line()}\n"
            f"Icon={self.icon}\n"
            "Terminal=false\n"
            "X-GNOME-Autostart-enabled=true\n"
        )

    def content(self) -> bytes:
        return self.entry().encode()

    def status(self) -> bool | str:
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
        lines = {line.strip().replace(" ", "") for line in text.splitlines()}
        if {"Hidden=true", "X-GNOME-Autostart-enabled=false"} & lines:
            return False
        found = next((line.strip()[5:] for line in text.splitlines() if line.strip().startswith("Exec=")), "")
        return True if found == self.exec_line() else _elsewhere(found, self.exec_line())


# -- macOS ----------------------------------------------------------------------------------

class LaunchAgent(_LoginFile):
    def __init__(self, command: list[str], home: Path | None = None, carried: dict[str, str] | None = None) -> None:
        self.path = (home or Path.home()) / "Library" / "LaunchAgents" / f"{LABEL}.plist"
        self.command = command
        self.carried = dict(carried or {})

    def plist(self) -> dict[str, Any]:
        doc = {"Label": LABEL, "ProgramArguments": list(self.command), "RunAtLoad": True,
               "ProcessType": "Interactive"}
        if self.carried:
            doc["EnvironmentVariables"] = dict(self.carried)
        return doc

    def content(self) -> bytes:
        import plistlib  # here: it brings the XML parser, which only a Mac's launch agent needs

        return plistlib.dumps(self.plist())

    def status(self) -> bool | str:
        import plistlib

        try:
            found = plistlib.loads(self.path.read_bytes())
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as exc:
            return f"on, but {self.path} cannot be read ({exc}); `cadre-desktop autostart on` rewrites it"
        if found == self.plist():
            return True
        def words(doc: dict[str, Any]) -> str:
            return " ".join([*(f"{k}={v}" for k, v in (doc.get("EnvironmentVariables") or {}).items()),
                             *map(str, doc.get("ProgramArguments") or [])])
        return _elsewhere(words(found), words(self.plist()))


# -- Windows -------------------------------------------------------------------------------------

class RunKey:
    """A value named after the app under HKCU's Run key; `winreg` is passed in."""

    where = f"HKCU\\{RUN_KEY}\\{APP_NAME}"

    def __init__(self, command: list[str], winreg: Any, carried: dict[str, str] | None = None) -> None:
        self.command = command
        self.winreg = winreg
        self.carried = dict(carried or {})

    def value(self) -> str:
        """The command line; with variables to carry, cmd sets them and starts the app (a Run
        value has no environment of its own)."""
        line = subprocess.list2cmdline(self.command)
        if not self.carried:
            return line
        sets = " && ".join(f'set "{k}={v}"' for k, v in self.carried.items())
        return f'cmd.exe /d /s /c "{sets} && start "" {line}"'

    def enable(self) -> str:
        reg = self.winreg
        try:
            with reg.CreateKeyEx(reg.HKEY_CURRENT_USER, RUN_KEY, 0, reg.KEY_SET_VALUE) as key:
                reg.SetValueEx(key, APP_NAME, 0, reg.REG_SZ, self.value())
        except OSError as exc:
            raise _failed(f"write {self.where}", exc) from None
        return f"set {self.where}"

    def disable(self) -> str:
        reg = self.winreg
        try:
            with reg.OpenKey(reg.HKEY_CURRENT_USER, RUN_KEY, 0, reg.KEY_SET_VALUE) as key:
                reg.DeleteValue(key, APP_NAME)
        except FileNotFoundError:
            return f"{self.where} was not there"
        except OSError as exc:
            raise _failed(f"delete {self.where}", exc) from None
        return f"deleted {self.where}"

    def status(self) -> bool | str:
        reg = self.winreg
        try:
            with reg.OpenKey(reg.HKEY_CURRENT_USER, RUN_KEY, 0, reg.KEY_READ) as key:
                found, _kind = reg.QueryValueEx(key, APP_NAME)
        except OSError:
            return False
        return True if found == self.value() else _elsewhere(str(found), self.value())


# -- this computer ------------------------------------------------------------------------------

def backend(platform: str | None = None, **kwargs: Any) -> RunKey | LaunchAgent | XdgAutostart:
    """The branch for `platform` (default: this one); kwargs override its command, home, env, winreg."""
    platform = platform or sys.platform
    command = kwargs.get("command") or launch_command(platform=platform)
    carried = kwargs["carried"] if "carried" in kwargs else carried_env(kwargs.get("env"))
    if platform == "win32":
        winreg = kwargs.get("winreg")
        if winreg is None:
            import winreg  # noqa: PLC0415 (Windows only)
        return RunKey(command, winreg, carried)
    if platform == "darwin":
        return LaunchAgent(command, kwargs.get("home"), carried)
    return XdgAutostart(command, kwargs.get("env"), carried)


def enable() -> str:
    return backend().enable()


def disable() -> str:
    return backend().disable()


def status() -> bool | str:
    return backend().status()
