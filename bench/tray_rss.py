"""The tray's memory the way a person's desktop sees it: a real X server, a real tray, the window never opened.

    .venv/bin/python bench/tray_rss.py [--nodes 10] [--seconds 60] [--cache installed,cold,as-found]
                                       [--only ours,floor,syncthingtray] [--baseline PATH] [--xdg-desktop GNOME]
                                       [--name tray-rss]

One desktop for the whole run: a private D-Bus session with an unlocked gnome-keyring, Xvfb and
`trayer` (an XEmbed tray, as tests/e2e use). On it, one after the other (so no two Qt programs
share pages while measured), each started, left `SETTLE_S` and sampled for `--seconds`:

  ours            `python -m cadre_desktop`, its home used before (the window stays closed), with
                  `--nodes` reference nodes added through the control API, all answering
  floor           a bare PySide6 tray icon with a two-item menu (what PySide6 costs on its own)
                  and the same with qasync's loop (what the event loop's glue adds)
  syncthingtray   Syncthing Tray (Debian's build) connected to a Syncthing of its own, when both are
                  installed (`apt-get install syncthingtray syncthing`)

For each: RSS, PSS, USS, its anonymous (private dirty) and file-backed parts, the biggest mappings,
the Qt plugins and GL/EGL libraries it maps, CPU % over the window with its context switches
(wake-ups) per minute, and the load average beside them.

Why page-cache states (`--cache`). Since Linux 6.18 a page fault on a file maps the whole
page-cache folio around it (up to 2 MB), not 64 KB: a library cached in big folios (as writing
a file leaves it: an install) shows up to its whole size as RSS at the first touch; one first
read through page faults (after a reboot) is cached in small folios and shows only what is used.
The memory is the page cache's either way (mapping it costs page tables only), but RSS differs
by tens of MB for the same program. `installed`: PySide6 and shiboken6 written afresh into the
run's folder (as pip, apt or an unpacked bundle leave them) and imported from there, the other
libraries evicted; `cold`: the libraries a program maps evicted before its start (only pages no
process maps can go: `posix_fadvise` DONTNEED; nothing else is touched), as after a reboot;
`as-found`: the cache as it is, which depends on what ran before (the issue's 94 MB was a fresh
install's, the footprint bench's 78.5 MB a cache read back through faults). Anonymous memory
(private dirty) is the same in all three: it is the part a program's own changes can move.
Syncthing Tray's libraries are the system's and Xvfb maps Mesa's: it runs `as-found` only.
`--xdg-desktop GNOME` sets XDG_CURRENT_DESKTOP for the programs: Qt then loads its gtk3
platform theme, and GTK 3 with it, as on a GNOME desktop.
Writes bench/results/NAME.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import _rig
import psutil
from _report import ROOT, markdown, table, write_result
from footprint import not_a_first_run, settings
from idle import api, task_switches

from tests.support.e2e.desktop import Desktop

SETTLE_S = 35.0  # beyond the standby pool's calm (standby.CALM_S, 30 s), as bench/footprint.py
GOAL_TRAY_MB = 70.0
FLOOR = """
import os, sys, glob
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QMenu, QSystemTrayIcon
app = QApplication(sys.argv[:1])
tray = QSystemTrayIcon(QIcon(sorted(glob.glob(sys.argv[1] + '/*.svg'))[0]))
menu = QMenu()
menu.addAction('Open'); menu.addAction('Quit')
tray.setContextMenu(menu)
tray.show()
if sys.argv[2] == 'qasync':
    import asyncio, qasync
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    with loop:
        loop.run_forever()
else:
    app.exec()
"""


# -- what a process maps -----------------------------------------------------------------------

def mappings(pid: int) -> dict[str, dict[str, int]]:
    """kB by mapping name (file base name, or [anon], [heap], ...): Rss, Private_Dirty, Anonymous, Size."""
    rows: dict[str, dict[str, int]] = {}
    current: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            head = line.split()
            if not head:
                continue
            if "-" in head[0] and not head[0].endswith(":"):
                name = head[5] if len(head) > 5 else "[anon]"
                name = name.rsplit("/", 1)[-1] if name.startswith("/") else name
                current = rows.setdefault(name, {"Rss": 0, "Private_Dirty": 0, "Anonymous": 0, "Size": 0})
            elif head[0].rstrip(":") in current:
                current[head[0].rstrip(":")] += int(head[1])
    return rows


def mapped_files(pid: int) -> list[str]:
    files = set()
    with open(f"/proc/{pid}/maps") as fh:
        for line in fh:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/"):
                files.add(parts[5].strip())
    return sorted(files)


def memory_of(pid: int) -> dict:
    """The process's memory, whole and by kind, in MB."""
    rows = mappings(pid)
    info = psutil.Process(pid).memory_full_info()
    anon = sum(r["Anonymous"] for r in rows.values()) / 1024
    files = mapped_files(pid)
    top = sorted(rows.items(), key=lambda kv: -kv[1]["Rss"])[:14]
    return {
        "rss_mb": info.rss / 2**20, "pss_mb": info.pss / 2**20, "uss_mb": info.uss / 2**20,
        "anonymous_mb": anon, "file_backed_rss_mb": info.rss / 2**20 - anon,
        "top_mappings_mb": [(name, round(r["Rss"] / 1024, 2), round(r["Size"] / 1024, 1)) for name, r in top],
        "qt_plugins": [f.split("/plugins/", 1)[1] for f in files if "/plugins/" in f],
        "gl_libraries": [f.rsplit("/", 1)[1] for f in files
                         if any(k in f.rsplit("/", 1)[1] for k in ("libGL", "libEGL", "dri", "LLVM", "glx"))],
        "fonts_mapped": [f for f in files if "/fonts/" in f or "fontconfig" in f and not f.endswith(".so.1.12.0")],
        "mapped_files": len(files),
        "qt_from": sorted({f.split("/PySide6/", 1)[0] for f in files if "/PySide6/" in f}),
    }


def evict(files: list[str]) -> int:
    """Drop the page cache of these files where no process maps it (after a reboot, as it were)."""
    done = 0
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            done += 1
        finally:
            os.close(fd)
    return done


def written_afresh(target: Path) -> Path:
    """PySide6 and shiboken6 copied into `target` by plain writes (the page cache then holds them in
    big folios, as after an install); `target` goes first on the programs' PYTHONPATH."""
    import PySide6
    import shiboken6

    for package in (PySide6, shiboken6):
        assert package.__file__ is not None
        source = Path(package.__file__).parent
        for dirpath, _, names in os.walk(source):
            into = target / source.name / Path(dirpath).relative_to(source)
            into.mkdir(parents=True, exist_ok=True)
            for name in names:
                with open(os.path.join(dirpath, name), "rb") as src, open(into / name, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                shutil.copymode(os.path.join(dirpath, name), into / name)
    return target


def libraries_under(*roots: Path) -> list[str]:
    out: list[str] = []
    for root in roots:
        for dirpath, _, names in os.walk(root):
            out.extend(os.path.join(dirpath, n) for n in names if ".so" in n)
    return out


# -- the contenders ----------------------------------------------------------------------------

class Contender:
    name = ""

    def start(self, env: dict[str, str]) -> None:
        raise NotImplementedError

    def pid(self) -> int:
        raise NotImplementedError

    def libraries(self) -> list[str]:
        """What `cold` evicts before the start: the shared libraries this program maps."""
        return []

    def modules(self) -> dict[str, int] | None:
        return None

    def helper_pids(self) -> list[int]:
        """Processes beside it that are there for it (Syncthing for its tray)."""
        return []

    def stop(self) -> None:
        raise NotImplementedError


def _end(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _python_libraries() -> list[str]:
    site = Path(psutil.__file__).resolve().parents[1]
    lib = Path(sys.executable).resolve().parents[1] / "lib"
    return libraries_under(site, *(p for p in lib.glob("libpython*")), lib / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "lib-dynload")


class Ours(Contender):
    def __init__(self, work: Path, nodes: int, base: int, checkout: Path = ROOT) -> None:
        self.name = f"cadre-desktop (tray), {nodes} nodes" + ("" if checkout == ROOT else f", {checkout}")
        self.work, self.nodes, self.base, self.checkout = work, nodes, base, checkout
        self.home = work / "home"
        self.proc: subprocess.Popen | None = None

    def libraries(self) -> list[str]:
        return _python_libraries()

    def start(self, env: dict[str, str]) -> None:
        self.home.mkdir(parents=True)
        env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(self.checkout)) if p)}
        (self.home / "settings.json").write_text(json.dumps(settings(self.base)))
        not_a_first_run(self.home)
        log = open(self.work / "app.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "cadre_desktop"], stdout=log, stderr=log, cwd=self.work,
                                     env={**env, "CADRE_DESKTOP_HOME": str(self.home),
                                          "PYTHONPROFILEIMPORTTIME": "1"})
        deadline = time.monotonic() + 120
        while True:
            try:
                if json.loads((self.home / "control.json").read_text()).get("pid") == self.proc.pid:
                    break
            except (OSError, ValueError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the tray app never served its API; see {self.work / 'app.log'}")
            time.sleep(0.1)
        for i in range(self.nodes):
            api(self.home, "POST", "/api/nodes", {"name": f"tray {i}"})
        while True:
            views = api(self.home, "GET", "/api/nodes")["nodes"]
            if len(views) == self.nodes and all(v["ready"] for v in views):
                return
            if time.monotonic() > deadline + 180:
                raise RuntimeError("the tray's nodes never all answered")
            time.sleep(0.5)

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def modules(self) -> dict[str, int]:
        """The modules it imported (its `-X importtime` lines, in its log), counted by top package."""
        packages: dict[str, int] = {}
        for line in (self.work / "app.log").read_text(errors="replace").splitlines():
            if line.startswith("import time:") and line.count("|") == 2:
                name = line.rsplit("|", 1)[1].strip()
                if name and name != "imported package":
                    top = name.split(".")[0]
                    packages[top] = packages.get(top, 0) + 1
        return dict(sorted(packages.items(), key=lambda kv: -kv[1]))

    def stop(self) -> None:
        _end(self.proc)


class Floor(Contender):
    def __init__(self, work: Path, loop: str) -> None:
        self.name = "PySide6 tray icon alone" + (" + qasync loop" if loop == "qasync" else "")
        self.work, self.loop = work, loop
        self.proc: subprocess.Popen | None = None

    def libraries(self) -> list[str]:
        return _python_libraries()

    def start(self, env: dict[str, str]) -> None:
        icons = ROOT / "cadre_desktop" / "ui" / "icons"
        self.proc = subprocess.Popen([sys.executable, "-c", FLOOR, str(icons), self.loop], env=env, cwd=self.work)

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        _end(self.proc)


class SyncthingTray(Contender):
    """Syncthing Tray connected to a Syncthing of its own (its config written, so no wizard opens)."""

    name = "Syncthing Tray + Syncthing"

    def __init__(self, work: Path, port: int) -> None:
        self.work, self.port = work, port
        self.procs: list[subprocess.Popen] = []

    @staticmethod
    def available() -> bool:
        return bool(shutil.which("syncthingtray") and shutil.which("syncthing"))

    def libraries(self) -> list[str]:
        tray = shutil.which("syncthingtray")
        assert tray is not None
        out = subprocess.run(["ldd", tray], capture_output=True, text=True).stdout
        return [line.split("=>")[1].split()[0] for line in out.splitlines() if "=>" in line and "/" in line]

    def start(self, env: dict[str, str]) -> None:
        home, config = self.work / "syncthing", self.work / "config"
        subprocess.run(["syncthing", "generate", f"--home={home}"], env=env, check=True, capture_output=True)
        key = (home / "config.xml").read_text().split("<apikey>", 1)[1].split("<", 1)[0]
        log = open(self.work / "syncthing.log", "wb")
        self.procs.append(subprocess.Popen(
            ["syncthing", "serve", f"--home={home}", "--no-browser", "--no-restart",
             f"--gui-address=127.0.0.1:{self.port}"], env={**env, "STNODEFAULTFOLDER": "1"}, stdout=log, stderr=log))
        config.mkdir()
        (config / "syncthingtray.ini").write_text(
            "[General]\nv=1.3.2\n\n[tray]\nconnections\\1\\label=bench\n"
            f"connections\\1\\syncthingUrl=http://127.0.0.1:{self.port}\nconnections\\1\\apiKey={key}\n"
            "connections\\1\\autoConnect=true\nconnections\\size=1\n")
        log = open(self.work / "syncthingtray.log", "wb")
        self.procs.append(subprocess.Popen(["syncthingtray", "--config-dir-path", str(config), "--wait"],
                                           env=env, stdout=log, stderr=log))

    def pid(self) -> int:
        return self.procs[-1].pid

    def helper_pids(self) -> list[int]:
        return [p.pid for p in self.procs[:-1]]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            _end(proc)


# -- the run -----------------------------------------------------------------------------------

def sample(contender: Contender, seconds: float, settle: float) -> dict:
    pid = contender.pid()
    proc = psutil.Process(pid)
    time.sleep(settle)
    t0, sw0, began = proc.cpu_times(), task_switches(pid), time.monotonic()
    load0 = os.getloadavg()
    time.sleep(seconds)
    elapsed = time.monotonic() - began
    t1, sw1 = proc.cpu_times(), task_switches(pid)
    result = memory_of(pid)
    result.update({
        "cpu_pct": 100 * (t1.user + t1.system - t0.user - t0.system) / elapsed,
        "wakeups_per_min": 60 * (sw1 - sw0) / elapsed, "threads": proc.num_threads(),
        "loadavg_during": [load0, os.getloadavg()],
    })
    modules = contender.modules()
    if modules is not None:
        result["modules_by_package"] = modules
        result["modules"] = sum(modules.values())
    helpers = contender.helper_pids()
    if helpers:
        result["helpers_rss_mb"] = {psutil.Process(p).name(): psutil.Process(p).memory_info().rss / 2**20
                                    for p in helpers}
    return result


def warm_up(work: Path, env: dict[str, str]) -> None:
    """One GTK program on the fresh X server first, as a desktop session has run before any tray: the
    first GTK program on an X server probes its GL visuals (loading Mesa: libLLVM, swrast, ~47 MB
    resident) and leaves the answer on the root window (GDK_VISUALS) for every later one."""
    floor = Floor(work, "plain")
    floor.start(env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and floor.proc is not None and floor.proc.poll() is None:
        try:
            if "libqgtk3" in Path(f"/proc/{floor.pid()}/maps").read_text():
                time.sleep(2)  # its theme is up; GTK's probe runs as it starts
                break
        except OSError:
            break
        time.sleep(0.2)
    floor.stop()


def run(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="cadre-tray-rss-"))
    session, bus_env = _rig.start_secret_service()
    desktop = Desktop(work, bus_env=bus_env)
    base = random.randrange(20000, 30000, 1000)
    only = set(args.only.split(","))
    result: dict = {"nodes": args.nodes, "seconds": args.seconds, "settle_s": args.settle,
                    "kernel": os.uname().release, "xdg_current_desktop": args.xdg_desktop, "loadavg_at_start": os.getloadavg(), "runs": []}
    try:
        desktop.start(tray="trayer")
        env = desktop.env(**bus_env)
        if args.xdg_desktop:
            env["XDG_CURRENT_DESKTOP"] = args.xdg_desktop  # GNOME: Qt loads its gtk3 platform theme, and GTK
            warm_up(work, env)
        for cache in args.cache.split(","):
            run_env = dict(env)
            if cache == "installed":
                fresh = written_afresh(work / "site-installed")
                run_env["PYTHONPATH"] = str(fresh)
            makers: list[Callable[[Path, int], Contender]] = []
            if "ours" in only:
                makers.append(lambda d, port: Ours(d, args.nodes, port))
                if args.baseline:
                    makers.append(lambda d, port: Ours(d, args.nodes, port, args.baseline.resolve()))
            if "floor" in only:
                makers += [lambda d, port: Floor(d, "plain"), lambda d, port: Floor(d, "qasync")]
            if "syncthingtray" in only and SyncthingTray.available() and cache == "as-found":
                makers.append(lambda d, port: SyncthingTray(d, port + 900))
            for make in makers:
                folder = Path(tempfile.mkdtemp(dir=work))
                contender = make(folder, base)
                evicted = evict(contender.libraries()) if cache in ("cold", "installed") else 0
                print(f"  {contender.name}, page cache {cache} ({evicted} libraries evicted)", file=sys.stderr)
                try:
                    contender.start(run_env)
                    measured = sample(contender, args.seconds, args.settle)
                finally:
                    contender.stop()
                result["runs"].append({"contender": contender.name, "cache": cache, **measured})
                base += 50
            shutil.rmtree(work / "site-installed", ignore_errors=True)
    finally:
        desktop.stop()
        session.stop()
        shutil.rmtree(work, ignore_errors=True)
    result["loadavg_at_end"] = os.getloadavg()
    return result


def report(result: dict) -> tuple[list[str], list[list]]:
    headers = ["program", "page cache", "RSS (MB)", "PSS (MB)", "USS (MB)", "anonymous (MB)", "file-backed RSS (MB)",
               "CPU %", "wake-ups/min", "threads", "load (1 min)"]
    rows = [[r["contender"], r["cache"], r["rss_mb"], r["pss_mb"], r["uss_mb"], r["anonymous_mb"],
             r["file_backed_rss_mb"], r["cpu_pct"], r["wakeups_per_min"], r["threads"], r["loadavg_during"][1][0]]
            for r in result["runs"]]
    return headers, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--settle", type=float, default=SETTLE_S, help="seconds left alone before sampling")
    parser.add_argument("--cache", default="installed,cold,as-found", help="page-cache states: installed, cold, as-found")
    parser.add_argument("--only", default="ours,floor,syncthingtray")
    parser.add_argument("--xdg-desktop", default="",
                        help="XDG_CURRENT_DESKTOP for the programs (GNOME: Qt's gtk3 theme loads GTK)")
    parser.add_argument("--baseline", type=Path, help="another checkout whose tray app runs after ours, alike")
    parser.add_argument("--name", default="tray-rss")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    _rig.compile_checkout()
    if args.baseline:
        _rig.compile_checkout(args.baseline.resolve())
    result = run(args)
    headers, rows = report(result)
    print(table(headers, rows))
    for r in result["runs"]:
        print(f"{r['contender']} ({r['cache']}): biggest mappings (name, RSS MB, size MB) {r['top_mappings_mb'][:8]}; "
              f"Qt plugins {r['qt_plugins']}; GL {r['gl_libraries']}")
    ours = [r for r in result["runs"] if r["contender"].startswith("cadre-desktop") and "/" not in r["contender"]]
    result["goals"] = [f"tray RSS ({r['cache']}) {r['rss_mb']:.1f} MB; goal <= {GOAL_TRAY_MB:g} MB  "
                       + ("MET" if r["rss_mb"] <= GOAL_TRAY_MB else "MISSED") for r in ours]
    for line in result["goals"]:
        print(line)
    result["markdown"] = markdown(headers, rows)
    if not args.no_save:
        print(f"wrote {write_result(args.name, result)}")


if __name__ == "__main__":
    main()
