"""Children a fork server made, as the host holds them: the subreaper switch, `Adopted`, and the
sweep that reaps orphans' zombies nobody waits for. Real processes of this test's own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from cadre_desktop.host.local.system import linux as forks
from cadre_desktop.host.local.system.linux import LinuxOS
from cadre_desktop.host.local.system.posix import PosixOS
from cadre_desktop.host.local.system.windows import WindowsOS

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreapers are Linux only")


def test_the_subreaper_is_asked_for_only_on_linux_with_pidfds():
    calls: list[tuple[int, int]] = []

    def prctl(option: int, value: int) -> int:
        calls.append((option, value))
        return 0

    assert not PosixOS().become_subreaper() and not WindowsOS().become_subreaper()
    assert not PosixOS().can_adopt() and not WindowsOS().can_adopt(), "forks only where nodes can be adopted"
    if sys.platform.startswith("linux"):
        assert LinuxOS(prctl=prctl).can_adopt()
        assert LinuxOS(prctl=prctl).become_subreaper() and calls == [(forks.PR_SET_CHILD_SUBREAPER, 1)]
        assert not LinuxOS(prctl=lambda option, value: -1).become_subreaper()


def test_stale_zombies_are_those_seen_twice():
    stale, seen = forks.stale_zombies([(10, "Z"), (11, "S"), (12, "Z")], set())
    assert stale == [] and seen == {10, 12}
    stale, seen = forks.stale_zombies([(10, "Z"), (11, "Z"), (13, "R")], seen)
    assert stale == [10] and seen == {11}, "a zombie seen once is reaped, or one gone is still remembered"


def _fork_child(code_or_signal: int | None) -> int:
    """A child of ours that exits with a code, or waits to be signalled (None)."""
    pid = os.fork()
    if pid == 0:
        if code_or_signal is None:
            signal.pause()
        os._exit(code_or_signal or 0)
    return pid


@linux_only
def test_adopted_waits_and_reads_the_exit_code():
    pid = _fork_child(None)
    child = forks.Adopted(pid, ["node"])
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.05)
    os.kill(pid, signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL and child.returncode == -signal.SIGKILL
    assert child.poll() == -signal.SIGKILL
    exited = forks.Adopted(_fork_child(3))
    assert exited.wait(timeout=10) == 3


@linux_only
def test_adopted_that_is_not_our_child_is_gone_with_no_code():
    other = forks.Adopted(1)  # init: never our child
    assert other.wait(timeout=0.01) is None and other.poll() is None


@linux_only
def test_an_orphans_zombie_is_reaped_at_the_second_look():
    assert LinuxOS().become_subreaper()
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:  # the middle child: makes a grandchild that exits after its parent left
        os.close(read_end)
        grandchild = os.fork()
        if grandchild == 0:
            os.close(write_end)
            os._exit(0)
        os.write(write_end, str(grandchild).encode())
        os._exit(0)
    os.close(write_end)
    orphan = int(os.read(read_end, 32))
    os.close(read_end)
    os.waitpid(middle, 0)

    def zombie() -> bool:
        return (orphan, "Z") in forks.child_states()
    from tests.support.polling import wait_until

    wait_until(zombie, timeout=10, what="the orphan, ours now, a zombie")
    stale, seen = forks.stale_zombies(forks.child_states(), set())
    assert stale == [] and orphan in seen
    stale, seen = LinuxOS().reap_stale(seen)
    assert orphan in stale
    assert not os.path.exists(f"/proc/{orphan}"), "the orphan's zombie was not reaped"


def test_a_standby_clones_only_where_it_knows_the_call(monkeypatch):
    from cadre_desktop.node.warm import forking as node_main

    class Uname:
        machine = "sparc64"
    monkeypatch.setattr(node_main.os, "uname", lambda: Uname())
    assert node_main.clone_parent() is None, "a clone on an arch whose clone(2) arguments are not known"
    Uname.machine = "x86_64"
    monkeypatch.setenv(node_main.TWO_FORKS_VAR, "1")
    assert node_main.clone_parent() is None, "two forks asked for, a clone made"


def _session_child(new_session: bool = True) -> int:
    """A child of ours that leads a session of its own (as a forked node does), waiting to be killed."""
    pid = os.fork()
    if pid == 0:
        if new_session:
            os.setsid()
        signal.pause()
        os._exit(0)
    return pid


def _end(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


@linux_only
def test_a_forked_pid_is_taken_only_when_it_is_our_new_child_leading_its_own_session():
    """Issue 39, item 1: the pid a fork server names is proven before the host uses it."""
    system = LinuxOS()
    since = system.fork_mark()
    assert since is not None
    made = _session_child()
    try:
        from tests.support.polling import wait_until

        wait_until(lambda: os.getsid(made) == made, timeout=10, what="the child in its own session")
        assert system.not_forked(made, server_pid=os.getpid() + 10**6, since=since) is None
        earlier = system.not_forked(made, server_pid=0, since=since + 10 * os.sysconf("SC_CLK_TCK"))
        assert earlier is not None and "before the request" in earlier, earlier
        assert "cannot be told" in (system.not_forked(made, server_pid=0, since=None) or ""), "no date, yet taken"
    finally:
        _end(made)


@linux_only
def test_a_named_pid_that_is_not_our_child_gone_or_in_our_session_is_refused():
    system = LinuxOS()
    since = system.fork_mark()
    not_ours = system.not_forked(os.getppid(), server_pid=0, since=since)
    assert not_ours is not None and "not this host's child" in not_ours, not_ours
    assert "no pid" in (system.not_forked(1, server_pid=0, since=since) or "")
    assert "no pid" in (system.not_forked(4242, server_pid=4242, since=since) or ""), "the fork server itself taken"
    sessionless = _session_child(new_session=False)
    try:
        assert "no session" in (system.not_forked(sessionless, server_pid=0, since=since) or "")
    finally:
        _end(sessionless)
    assert "no process" in (system.not_forked(sessionless, server_pid=0, since=since) or "")


def test_an_os_that_cannot_adopt_refuses_every_forked_pid():
    assert PosixOS().fork_mark() is None and WindowsOS().fork_mark() is None
    assert PosixOS().not_forked(os.getpid(), 0, None) and WindowsOS().not_forked(os.getpid(), 0, None)


@linux_only
def test_a_forked_node_that_already_ended_is_still_taken_so_its_exit_is_told():
    system = LinuxOS()
    since = system.fork_mark()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        os._exit(3)
    from tests.support.polling import wait_until

    wait_until(lambda: (pid, "Z") in forks.child_states(), timeout=10, what="the child ended, not reaped")
    assert system.not_forked(pid, server_pid=0, since=since) is None
    assert forks.Adopted(pid).wait(timeout=10) == 3, "its exit code was lost"
