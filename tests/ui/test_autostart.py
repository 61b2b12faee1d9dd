"""Start at login, every platform's branch checked on Linux."""

from __future__ import annotations

import plistlib
import subprocess
import sys
from pathlib import Path

import pytest

from cadre_desktop import autostart
from cadre_desktop.autostart import LaunchAgent, RunKey, XdgAutostart, backend, launch_command

COMMAND = ["/opt/my apps/python3", "-m", "cadre_desktop"]


def test_linux_writes_an_xdg_autostart_entry(tmp_path):
    xdg = XdgAutostart(COMMAND, env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert xdg.status() is False
    assert "wrote" in xdg.enable()
    path = tmp_path / "autostart" / "cadre-desktop.desktop"
    lines = path.read_text().splitlines()
    assert lines[0] == "[Desktop Entry]"
    assert 'Exec="/opt/my apps/python3" -m cadre_desktop' in lines
    assert "Type=Application" in lines and "X-GNOME-Autostart-enabled=true" in lines
    assert xdg.status() is True
    assert "deleted" in xdg.disable()
    assert not path.exists() and xdg.status() is False
    assert "was not there" in xdg.disable()


def test_linux_defaults_to_home_config_and_honours_a_disabled_entry(tmp_path):
    xdg = XdgAutostart(COMMAND, env={"HOME": str(tmp_path)})
    assert xdg.path == tmp_path / ".config" / "autostart" / "cadre-desktop.desktop"
    xdg.enable()
    xdg.path.write_text(xdg.path.read_text() + "Hidden=true\n")
    assert xdg.status() is False


def test_exec_quoting_follows_the_desktop_entry_spec():
    assert autostart.desktop_exec(["/usr/bin/python3", "-m", "cadre_desktop"]) == "/usr/bin/python3 -m cadre_desktop"
    assert autostart.desktop_exec(['/a b/$x"y', "50%"]) == r'"/a b/\\$x\\"y" 50%%'


def test_macos_writes_a_launch_agent(tmp_path):
    agent = LaunchAgent(COMMAND, home=tmp_path)
    assert agent.status() is False
    agent.enable()
    path = tmp_path / "Library" / "LaunchAgents" / "org.cadre.desktop.plist"
    doc = plistlib.loads(path.read_bytes())
    assert doc == {"Label": "org.cadre.desktop", "ProgramArguments": COMMAND, "RunAtLoad": True,
                   "ProcessType": "Interactive"}
    assert agent.status() is True
    agent.disable()
    assert not path.exists() and agent.status() is False


class FakeWinreg:
    """Just enough of `winreg` to record what the Run key branch does."""

    HKEY_CURRENT_USER = "HKCU"
    KEY_SET_VALUE, KEY_READ, REG_SZ = 2, 1, 1

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], tuple[int, str]] = {}
        self.calls: list[tuple] = []

    class Key:
        def __init__(self, path: str) -> None:
            self.path = path

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            pass

    def CreateKeyEx(self, root, path, reserved, access):  # noqa: N802
        self.calls.append(("CreateKeyEx", root, path, access))
        return self.Key(path)

    def OpenKey(self, root, path, reserved, access):  # noqa: N802
        self.calls.append(("OpenKey", root, path, access))
        return self.Key(path)

    def SetValueEx(self, key, name, reserved, kind, value):  # noqa: N802
        self.calls.append(("SetValueEx", key.path, name, kind, value))
        self.values[(key.path, name)] = (kind, value)

    def QueryValueEx(self, key, name):  # noqa: N802
        if (key.path, name) not in self.values:
            raise FileNotFoundError(2, "not found")
        kind, value = self.values[(key.path, name)]
        return value, kind

    def DeleteValue(self, key, name):  # noqa: N802
        self.calls.append(("DeleteValue", key.path, name))
        if self.values.pop((key.path, name), None) is None:
            raise FileNotFoundError(2, "not found")


def test_windows_sets_the_hkcu_run_value():
    reg = FakeWinreg()
    run = RunKey([r"C:\Program Files\Cadre\pythonw.exe", "-m", "cadre_desktop"], reg)
    assert run.status() is False
    run.enable()
    assert ("CreateKeyEx", "HKCU", r"Software\Microsoft\Windows\CurrentVersion\Run", reg.KEY_SET_VALUE) in reg.calls
    assert reg.values[(autostart.RUN_KEY, "cadre-desktop")] == (
        reg.REG_SZ, r'"C:\Program Files\Cadre\pythonw.exe" -m cadre_desktop')
    assert run.status() is True
    run.disable()
    assert run.status() is False
    assert "was not there" in run.disable()


def test_each_platform_gets_its_branch(tmp_path):
    assert isinstance(backend("linux", env={"HOME": str(tmp_path)}), XdgAutostart)
    assert isinstance(backend("darwin", home=tmp_path), LaunchAgent)
    assert isinstance(backend("win32", winreg=FakeWinreg()), RunKey)


def test_a_frozen_bundle_starts_itself(tmp_path):
    assert launch_command(frozen=True, executable="/Applications/Cadre.app/Contents/MacOS/cadre") == [
        "/Applications/Cadre.app/Contents/MacOS/cadre"]
    assert launch_command(frozen=False, executable="/venv/bin/python", platform="linux") == [
        "/venv/bin/python", "-m", "cadre_desktop"]
    (tmp_path / "python.exe").touch()
    (tmp_path / "pythonw.exe").touch()
    assert launch_command(frozen=False, executable=str(tmp_path / "python.exe"), platform="win32") == [
        str(tmp_path / "pythonw.exe"), "-m", "cadre_desktop"]


def test_a_write_that_fails_is_an_error_in_words(tmp_path):
    (tmp_path / "autostart").write_text("a file where a folder should be")
    with pytest.raises(autostart.AutostartError, match="Could not write"):
        XdgAutostart(COMMAND, env={"XDG_CONFIG_HOME": str(tmp_path)}).enable()


def test_the_cli_uses_the_same_code_and_loads_no_qt(tmp_path):
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "PATH": "/usr/bin:/bin"}
    run = lambda *args: subprocess.run([sys.executable, "-m", "cadre_desktop", "autostart", *args],  # noqa: E731
                                       env=env, capture_output=True, text=True, timeout=60)
    assert run("status").stdout.strip() == "autostart is off"
    assert run("on").returncode == 0
    entry = (tmp_path / "cfg" / "autostart" / "cadre-desktop.desktop").read_text()
    assert f"Exec={autostart.desktop_exec(launch_command())}" in entry
    assert run("status").stdout.strip() == "autostart is on"
    assert run("off").returncode == 0
    assert run("status").stdout.strip() == "autostart is off"
    code = "import sys, cadre_desktop.autostart; print([m for m in sys.modules if 'PySide6' in m])"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"


def test_bundled_windows_login_entry_points_at_the_windowed_executable():
    from cadre_desktop.autostart import launch_command

    cmd = launch_command(frozen=True, executable=r"C:\Apps\cadre-desktop\cadre-desktop-cli.exe", platform="win32")
    assert cmd[0].endswith("cadre-desktop.exe") and "cli" not in cmd[0]
    assert launch_command(frozen=True, executable="/opt/cadre-desktop/cadre-desktop", platform="linux") == [
        "/opt/cadre-desktop/cadre-desktop"]


# -- the entry finds the same home -------------------------------------------------------------

def test_the_login_entry_carries_the_home_made_absolute_and_the_keyring(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "CADRE_DESKTOP_HOME": "my home",
           "PYTHON_KEYRING_BACKEND": "keyring.backends.SecretService.Keyring", "XDG_DATA_HOME": "/elsewhere"}
    xdg = backend("linux", env=env, command=COMMAND)
    assert isinstance(xdg, XdgAutostart)
    xdg.enable()
    exec_line = next(line for line in xdg.path.read_text().splitlines() if line.startswith("Exec="))
    assert exec_line == (f'Exec=env "CADRE_DESKTOP_HOME={tmp_path}/my home" '
                         '"PYTHON_KEYRING_BACKEND=keyring.backends.SecretService.Keyring" "/opt/my apps/python3" '
                         '-m cadre_desktop').replace("\\", "\\\\")
    assert "XDG_DATA_HOME" not in exec_line  # a home holds everything
    assert xdg.status() is True


def test_without_a_home_the_platform_folders_are_carried():
    assert autostart.carried_env({"XDG_DATA_HOME": "/d", "XDG_STATE_HOME": "/s", "XDG_CONFIG_HOME": "/c"}) == {
        "XDG_DATA_HOME": "/d", "XDG_STATE_HOME": "/s"}


def test_status_says_when_the_entry_starts_something_else(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path), "CADRE_DESKTOP_HOME": str(tmp_path / "a")}
    backend("linux", env=env, command=COMMAND).enable()
    other = backend("linux", env={**env, "CADRE_DESKTOP_HOME": str(tmp_path / "b")}, command=COMMAND)
    said = other.status()
    assert isinstance(said, str) and said.startswith("on, but the entry starts")
    assert str(tmp_path / "a") in said and "autostart on` points it here" in said
    other.enable()
    assert other.status() is True


def test_macos_and_windows_entries_carry_the_home_too(tmp_path):
    carried = {"CADRE_DESKTOP_HOME": "/Users/me/cadre"}
    agent = LaunchAgent(COMMAND, home=tmp_path, carried=carried)
    agent.enable()
    assert plistlib.loads(agent.path.read_bytes())["EnvironmentVariables"] == carried
    assert agent.status() is True
    assert isinstance(LaunchAgent(COMMAND, home=tmp_path).status(), str)

    reg = FakeWinreg()
    run = RunKey([r"C:\Apps\cadre-desktop.exe"], reg, {"CADRE_DESKTOP_HOME": r"C:\Users\me\cadre"})
    run.enable()
    assert reg.values[(autostart.RUN_KEY, "cadre-desktop")][1] == (
        r'cmd.exe /d /s /c "set "CADRE_DESKTOP_HOME=C:\Users\me\cadre" && start "" C:\Apps\cadre-desktop.exe"')
    assert run.status() is True
    assert isinstance(RunKey([r"C:\Apps\cadre-desktop.exe"], reg).status(), str)


def test_the_cli_says_when_the_entry_points_elsewhere(tmp_path):
    base = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "PATH": "/usr/bin:/bin"}
    run = lambda home, *args: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "cadre_desktop", "autostart", *args], env={**base, "CADRE_DESKTOP_HOME": home},
        capture_output=True, text=True, timeout=60)
    assert run(str(tmp_path / "a"), "on").returncode == 0
    assert run(str(tmp_path / "a"), "status").stdout.strip() == "autostart is on"
    said = run(str(tmp_path / "b"), "status").stdout.strip()
    assert said.startswith("autostart is on, but the entry starts") and str(tmp_path / "a") in said


# -- what the entry starts, and its icon --------------------------------------------------------

def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_entry_starts_the_command_installed_with_this_python_not_the_interpreter(tmp_path):
    """Regression: the entry named the interpreter of wherever the app was first run from."""
    python = executable(tmp_path / "venv" / "bin" / "python")
    script = executable(tmp_path / "venv" / "bin" / "cadre-desktop")
    assert launch_command(frozen=False, executable=str(python), platform="linux", path="") == [str(script)]
    # pipx: a link on PATH to the script beside this interpreter is the stable name.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "cadre-desktop").symlink_to(script)
    assert launch_command(frozen=False, executable=str(python), platform="darwin", path=str(tmp_path / "bin")) == [
        str(tmp_path / "bin" / "cadre-desktop")]


def test_a_cadre_desktop_of_another_python_is_never_started(tmp_path):
    python = executable(tmp_path / "checkout" / ".venv" / "bin" / "python")
    executable(tmp_path / "other" / "cadre-desktop")  # another install on PATH: not this app
    assert launch_command(frozen=False, executable=str(python), platform="linux", path=str(tmp_path / "other")) == [
        str(python), "-m", "cadre_desktop"]


def test_windows_keeps_the_windowed_interpreter_even_beside_a_console_script(tmp_path):
    python = executable(tmp_path / "python.exe")
    executable(tmp_path / "pythonw.exe")
    executable(tmp_path / "cadre-desktop")
    assert launch_command(frozen=False, executable=str(python), platform="win32", path="") == [
        str(tmp_path / "pythonw.exe"), "-m", "cadre_desktop"]


def test_the_entry_names_an_icon_that_is_there(tmp_path):
    """Regression: Icon=cadre-desktop where no icon of that name was installed showed none."""
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_DATA_DIRS": str(tmp_path / "system")}
    icon = next(line[5:] for line in XdgAutostart(COMMAND, env=env).entry().splitlines() if line.startswith("Icon="))
    assert Path(icon).is_absolute() and Path(icon).is_file() and icon.endswith("app.svg")
    themed = tmp_path / "system" / "icons" / "hicolor" / "scalable" / "apps" / "cadre-desktop.svg"
    themed.parent.mkdir(parents=True)
    themed.write_text("<svg/>")
    assert "Icon=cadre-desktop" in XdgAutostart(COMMAND, env=env).entry().splitlines()
