"""Each platform's class of the process seam (`system/seam.py`), exercised with fake OS calls."""

import os
import signal
import subprocess
import sys

import pytest

from cadre_desktop.host.local.system import procs
from cadre_desktop.host.local.system.linux import LinuxOS
from cadre_desktop.host.local.system.posix import PosixOS
from cadre_desktop.host.local.system.windows import CREATE_NEW_PROCESS_GROUP, CREATE_NO_WINDOW, WindowsOS


class Recorder:
    def __init__(self):
        self.calls = []

    def killpg(self, pid, sig):
        self.calls.append(("killpg", pid, sig))

    def kill(self, pid, sig):
        self.calls.append(("kill", pid, sig))

    def kill_tree(self, pid):
        self.calls.append(("kill_tree", pid))

    def ops(self):
        return procs.SignalOps(killpg=self.killpg, kill=self.kill)

    def seam(self, platform):
        """The platform's class, its signals (and Windows' tree kill) this recorder's."""
        if platform == "win32":
            return WindowsOS(self.ops(), tree_kill=self.kill_tree)
        return (LinuxOS if platform == "linux" else PosixOS)(self.ops())


class SpawnSpy:
    """What a platform's spawn hands subprocess.Popen."""

    def __init__(self, monkeypatch):
        self.kwargs: dict = {}
        monkeypatch.setattr(subprocess, "Popen", self)

    def __call__(self, args, **kwargs):
        self.kwargs = kwargs
        return "popen"


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_posix_children_get_their_own_session_and_group_signals(platform, monkeypatch):
    rec = Recorder()
    spy = SpawnSpy(monkeypatch)
    rec.seam(platform).spawn(["node"], env={}, cwd=None, stdin=None, stdout=None, stderr=None)
    assert spy.kwargs["start_new_session"] is True and spy.kwargs["creationflags"] == 0
    rec.seam(platform).signal_group(42, None, kill=False)
    rec.seam(platform).signal_group(42, None, kill=True)
    assert rec.calls == [("killpg", 42, signal.SIGTERM), ("killpg", 42, signal.SIGKILL)]


def test_windows_children_get_a_new_process_group_and_break_then_tree_kill(monkeypatch):
    rec = Recorder()
    spy = SpawnSpy(monkeypatch)
    rec.seam("win32").spawn(["node"], env={}, cwd=None, stdin=None, stdout=None, stderr=None)
    assert spy.kwargs["creationflags"] & CREATE_NEW_PROCESS_GROUP == 0x00000200
    assert spy.kwargs["creationflags"] & CREATE_NO_WINDOW == 0x08000000
    assert spy.kwargs["start_new_session"] is False
    rec.seam("win32").signal_group(42, None, kill=False)
    rec.seam("win32").signal_group(42, None, kill=True)  # no job: its process tree
    assert rec.calls[0][0:2] == ("kill", 42)
    assert rec.calls[1] == ("kill_tree", 42)


def test_a_vanished_group_is_not_an_error():
    def gone(pid, sig):
        raise ProcessLookupError()
    linux = LinuxOS(procs.SignalOps(killpg=gone, kill=gone))
    linux.signal_group(42, None, kill=False)
    linux.signal_group(42, None, kill=True)
    linux.kill_pids([42])
    assert not linux.group_exists(42)


def test_identity_of_a_live_process_matches_itself_only():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        linux = LinuxOS().read_identity(child.pid)
        other = PosixOS().read_identity(child.pid)  # the psutil branch
        assert linux and linux.boot_id and linux.start_time.isdigit()
        assert other and other.boot_id is None
        assert linux.matches(LinuxOS().read_identity(child.pid))
        assert other.matches(PosixOS().read_identity(child.pid))
        assert not linux.matches(procs.Identity(str(int(linux.start_time) + 1), linux.boot_id))
        assert not linux.matches(procs.Identity(linux.start_time, "another-boot"))
        assert not other.matches(procs.Identity(str(float(other.start_time) + 2)))
    finally:
        child.kill()
        child.wait()
    assert LinuxOS().read_identity(child.pid) is None
    assert PosixOS().read_identity(child.pid) is None


def test_identity_reads_a_command_name_with_spaces_and_parens(tmp_path):
    exe = tmp_path / "odd (name) x"
    exe.symlink_to(sys.executable)
    child = subprocess.Popen([str(exe), "-c", "import time; time.sleep(30)"])
    try:
        ident = LinuxOS().read_identity(child.pid)
        assert ident and ident.start_time.isdigit()
    finally:
        child.kill()
        child.wait()


def test_zombie_counts_as_gone():
    from tests.support.polling import wait_until

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # The child exits but stays unreaped (a zombie) until child.wait() below.
    wait_until(lambda: LinuxOS().read_identity(child.pid) is None, what="zombie")
    child.wait()


async def test_thread_watcher_branch_reports_exit(monkeypatch):
    import asyncio
    monkeypatch.delattr(os, "pidfd_open", raising=False)
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])
    loop = asyncio.get_running_loop()
    got = loop.create_future()
    LinuxOS().watch_exit(loop, child.pid, child, got.set_result)
    assert await asyncio.wait_for(got, 10) == 7


def test_end_child_terminates_then_kills_after_the_grace_only_when_the_child_stays():
    """Terminate, a grace period, then kill (the blocking form doctor uses): a child that
    ignores SIGTERM is killed once the grace is over; one that obeys is never killed."""
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                 "print('ready', flush=True)\ntime.sleep(60)"],
                                stdout=subprocess.PIPE, start_new_session=True)
    assert stubborn.stdout is not None
    assert stubborn.stdout.readline() == b"ready\n"
    rec = Recorder()
    real = procs.SignalOps()

    def killpg(pid: int, sig: int) -> None:
        rec.killpg(pid, sig)
        real.killpg(pid, sig)
    ops = procs.SignalOps(killpg=killpg, kill=rec.kill)
    linux = LinuxOS(ops)
    assert linux.end_child(stubborn, grace_s=0.2) == -signal.SIGKILL
    assert rec.calls == [("killpg", stubborn.pid, signal.SIGTERM), ("killpg", stubborn.pid, signal.SIGKILL)]
    stubborn.stdout.close()

    obedient = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    rec.calls.clear()
    assert linux.end_child(obedient, grace_s=30) == -signal.SIGTERM
    assert rec.calls == [("killpg", obedient.pid, signal.SIGTERM)]
    assert linux.end_child(obedient, grace_s=30) == -signal.SIGTERM  # already gone
    assert len(rec.calls) == 1


def test_without_node_vars_drops_every_inherited_cadre_variable_only():
    env = {"PATH": "/bin", "CADRE_CLAIM_SECRET": "s", "CADRE_DESKTOP_HOME": "/h", "CADRE_X": "", "HOME": "/home"}
    assert procs.without_node_vars(env) == {"PATH": "/bin", "HOME": "/home"}


class FakePopen:
    """A child that ends only at the n-th wait (n=1: on the terminate; n=2: only after the kill)."""

    def __init__(self, ends_at_wait: int):
        self.pid, self._waits, self._ends_at = 4242, 0, ends_at_wait
        self.returncode: int | None = None

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        self._waits += 1
        if self._waits < self._ends_at:
            raise subprocess.TimeoutExpired("node", timeout)
        self.returncode = 1
        return 1


@pytest.mark.parametrize("platform, terminate, kill", [
    ("win32", ("kill", 4242, getattr(signal, "CTRL_BREAK_EVENT", 1)), ("kill_tree", 4242)),
    ("darwin", ("killpg", 4242, signal.SIGTERM), ("killpg", 4242, signal.SIGKILL)),
])
def test_end_child_on_each_platform_breaks_or_terminates_first_and_kills_only_a_child_that_stays(
        platform, terminate, kill):
    rec = Recorder()
    # a fake child (pid, poll, wait) where a Popen goes
    assert rec.seam(platform).end_child(FakePopen(ends_at_wait=1),
                                        grace_s=0.01) == 1
    assert rec.calls == [terminate]
    rec.calls.clear()
    assert rec.seam(platform).end_child(FakePopen(ends_at_wait=2),
                                        grace_s=0.01) == 1
    assert rec.calls == [terminate, kill]
