"""A small real desktop for end-to-end tests: Xvfb, a system tray, xdotool, screenshots.

The tray is `trayer` (the XEmbed protocol) or `gtk-sni-tray-standalone` with its
own StatusNotifierWatcher (the StatusNotifierItem protocol, over D-Bus).

Screenshots are taken by `grab.py`, a few lines of Qt on the xcb platform run in
a subprocess (no ImageMagick needed). Every wait polls with a deadline.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.polling import wait_until

GRAB = Path(__file__).with_name("grab.py")
REPO = Path(__file__).resolve().parents[3]
SHOTS = REPO / "docs" / "screenshots"
TOOLS = ("Xvfb", "trayer", "xdotool", "xwininfo", "zbarimg", "dunst", "dunstctl", "dbus-monitor",
         "gtk-sni-tray-standalone", "status-notifier-watcher")


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


@dataclass
class Box:
    x: int
    y: int
    width: int
    height: int

    @property
    def centre(self) -> tuple[int, int]:
        return self.x + self.width // 2, self.y + self.height // 2


class Desktop:
    def __init__(self, root: Path, bus_env: dict[str, str] | None = None) -> None:
        self.root = root
        self.bus_env = dict(bus_env or {})
        self.procs: list[subprocess.Popen] = []
        self.display = ""
        self.tray = ""

    # -- life ------------------------------------------------------------------------

    def start(self, size: str = "1280x800x24", tray: str = "trayer") -> Desktop:
        """Xvfb, then the tray; what was started is stopped again when a part fails."""
        try:
            return self._start(size, tray)
        except BaseException:
            self.stop()
            raise

    def _start(self, size: str, tray: str) -> Desktop:
        read, write = os.pipe()
        log = open(self.root / "xvfb.log", "wb")
        # -noreset: an X server resets when its last client leaves, and refuses connections for a
        # moment meanwhile; a client that came and went (the check below, or a stray one of a dead
        # desktop whose display number this one was just given, beside another suite) made the
        # panel's own connection fail: "cannot open display: :1".
        xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", size, "-nolisten", "tcp",
                                 "-noreset"], pass_fds=(write,), stdout=log, stderr=log)
        os.close(write)
        self.procs.append(xvfb)
        with os.fdopen(read) as fh:
            number = fh.readline().strip()
        if not number:
            raise RuntimeError(f"Xvfb did not start: {(self.root / 'xvfb.log').read_text(errors='replace')[-2000:]}")
        self.display = f":{number}"
        self.tray = tray
        # The display answers before anything is started on it.
        self._until_up(xvfb, "Xvfb", lambda: subprocess.run(["xwininfo", "-root"], env=self.env(), timeout=20,
                                                             capture_output=True).returncode == 0)
        if tray == "sni":
            return self._start_sni()
        log = open(self.root / "trayer.log", "wb")
        trayer = subprocess.Popen(
            ["trayer", "--edge", "top", "--align", "right", "--widthtype", "request", "--height", "32",
             "--SetDockType", "true", "--transparent", "false"],
            env=self.env(), stdout=log, stderr=log)
        self.procs.append(trayer)
        # Each look starts a program (xdotool): a few a second, and a minute's room on a machine another
        # suite keeps busy (it failed there at 20 s, twenty looks a second crowding the panel's own start).
        self._until_up(trayer, "trayer", lambda: self.window_id("--classname", "panel"), timeout=60)
        return self

    def _until_up(self, proc: subprocess.Popen, name: str, up, timeout: float = 20) -> None:
        """Until `up()`, or fail at once with its log when `proc` ended."""
        def check() -> bool:
            if proc.poll() is not None:
                logs = [p for p in self.root.glob(f"{name.lower()}*.log")]
                said = logs[0].read_text(errors="replace")[-2000:] if logs else ""
                raise RuntimeError(f"{name} ended (exit {proc.returncode}) before it was up: {said}")
            return bool(up())

        wait_until(check, timeout=timeout, interval=0.25, what=f"{name} up on {self.display}")

    def _start_sni(self) -> Desktop:
        """The watcher on its own first, then the panel once the watcher owns its name.

        `gtk-sni-tray-standalone --watcher` starts its watcher and its panel at once, and its
        panel reads the watcher's items right away: on a busy machine it asked before its own
        watcher held the name, got "ServiceUnknown" and died (a pattern-match failure), taking
        the watcher with it, and the test waited a minute for a name nobody would take."""
        from tests.support.e2e.bus import WATCHER, wait_for_owner

        address = self.bus_env["DBUS_SESSION_BUS_ADDRESS"]
        log = open(self.root / "sni-watcher.log", "wb")
        watcher = subprocess.Popen(["status-notifier-watcher"], env=self.env(), stdout=log, stderr=log)
        self.procs.append(watcher)
        wait_for_owner(address, WATCHER, watcher, "status-notifier-watcher")
        log = open(self.root / "sni-tray.log", "wb")
        panel = subprocess.Popen(["gtk-sni-tray-standalone", "--top", "--end", "-s", "32"], env=self.env(),
                                 stdout=log, stderr=log)
        self.procs.append(panel)
        wait_for_owner(address, f"org.kde.StatusNotifierHost-standalone-{panel.pid}", panel, "the SNI panel")
        return self

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, **self.bus_env, "DISPLAY": self.display, "QT_QPA_PLATFORM": "xcb", **extra}
        env.pop("WAYLAND_DISPLAY", None)
        return env

    # -- looking -----------------------------------------------------------------------

    def xdotool(self, *args: str) -> str:
        out = subprocess.run(["xdotool", *args], env=self.env(), capture_output=True, text=True, timeout=20)
        return out.stdout.strip()

    def window_id(self, *search: str) -> str | None:
        ids = self.xdotool("search", "--onlyvisible", *search).split()
        return ids[-1] if ids else None

    def geometry(self, window: str) -> Box:
        values = dict(line.split("=", 1) for line in self.xdotool("getwindowgeometry", "--shell", window).splitlines())
        return Box(int(values["X"]), int(values["Y"]), int(values["WIDTH"]), int(values["HEIGHT"]))

    def visible(self, title: str, min_height: int = 0) -> Box | None:
        """The first mapped top-level window whose title matches the regex `title` (popup
        menus included, which `xdotool search` does not see), at least `min_height` tall."""
        tree = subprocess.run(["xwininfo", "-root", "-children"], env=self.env(), capture_output=True,
                              text=True, timeout=20).stdout
        pattern = title
        for match in re.finditer(r'^\s+(0x[0-9a-f]+) "(.*?)":.*?(\d+)x(\d+)\+(-?\d+)\+(-?\d+)', tree, re.M):
            window, name, width, height, x, y = match.groups()
            if not re.fullmatch(pattern, name) or int(height) < min_height:
                continue
            info = subprocess.run(["xwininfo", "-id", window], env=self.env(), capture_output=True,
                                  text=True, timeout=20).stdout
            if "IsViewable" in info:
                return Box(int(x), int(y), int(width), int(height))
        return None

    def tray_box(self) -> Box:
        # Looked for again for a moment: one search found no panel with the panel on the screen
        # (its failure.png), while the tray's balloon came up (likely a window going away as
        # xdotool walked the tree), and the test failed at once.
        panel = wait_until(lambda: self.window_id("--classname", "panel"), timeout=10, interval=0.2,
                           what="the panel window")
        return self.geometry(panel)

    def screenshot(self, path: Path, box: Box | None = None) -> dict[str, int]:
        """Save the screen (or a box of it) to `path`; for a box, return its colours and their counts."""
        args = [str(path)] + ([str(box.x), str(box.y), str(box.width), str(box.height)] if box else [])
        out = subprocess.run([sys.executable, str(GRAB), *args], env=self.env(), check=True, timeout=60,
                             capture_output=True, text=True).stdout
        return {colour: int(count) for colour, count in (line.split() for line in out.splitlines())}

    # -- doing ---------------------------------------------------------------------------

    def click(self, x: int, y: int, button: int = 1) -> None:
        self.xdotool("mousemove", str(x), str(y), "click", str(button))

    def focused(self) -> str:
        """The title of the window with the keyboard focus."""
        return self.xdotool("getwindowfocus", "getwindowname")

    def keys(self, *keys: str) -> None:
        self.xdotool("key", "--delay", "60", *keys)


def start_desktop(root: Path, bus_env: dict[str, str] | None = None, tray: str = "trayer") -> Desktop:
    """A started desktop, or the test fails naming the tools ./scripts/test installs."""
    import pytest

    if missing_tools():
        pytest.fail(f"missing {', '.join(missing_tools())}: ./scripts/test installs them")
    return Desktop(root, bus_env=bus_env).start(tray=tray)


@contextmanager
def running_app(desktop: Desktop, home: Path, log: Path, welcome: bool = False,
                **extra_env: str) -> Iterator[subprocess.Popen]:
    """The tray app for `home` on this desktop. On a failure the screen is saved; at the
    end the app is stopped and the last of its log printed. A fresh home is a first start,
    which opens the window with its welcome; unless `welcome`, the home is made a used one."""
    if not welcome:
        from cadre_desktop.host.core.records.store import RecordStore

        home.mkdir(parents=True, exist_ok=True)
        RecordStore(home / "hosted-nodes.json").persist_home()
    env = desktop.env(CADRE_DESKTOP_HOME=str(home), PYTHONPATH=str(REPO), **extra_env)
    out = open(log, "ab")
    app = subprocess.Popen([sys.executable, "-m", "cadre_desktop"], env=env, stdout=out, stderr=out)
    try:
        yield app
    except BaseException:
        desktop.screenshot(desktop.root / "failure.png")
        print("the screen at the failure:", desktop.root / "failure.png")
        raise
    finally:
        if app.poll() is None:
            app.terminate()
            app.wait(timeout=30)
        out.close()
        print(log.read_text(errors="replace")[-4000:])


def keep(shot: Path, name: str) -> None:
    """Copy a screenshot to docs/screenshots/ when it is missing there or CADRE_UPDATE_SCREENSHOTS=1."""
    target = SHOTS / name
    if os.environ.get("CADRE_UPDATE_SCREENSHOTS") == "1" or not target.exists():
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, target)
