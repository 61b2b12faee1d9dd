"""The systemd driver through the real headless host, on the tests' own user manager.

Every host here runs with `driver: "systemd"` and its `XDG_RUNTIME_DIR` the rig's
(tests/support/user_manager.py), so its nodes are units of that manager. A crash is
`KillUnit` SIGKILL (`systemctl --user kill`); what runs is what the manager lists.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import psutil
import pytest

from tests.support.headless import REPO, HeadlessHost, added, fast_settings, running_node
from tests.support.polling import async_wait_until, wait_until
from tests.support.user_manager import UserManager, census, moved, session_manager

HOG = [sys.executable, str(REPO / "tests" / "support" / "cap_nodes.py"), "hog"]


@pytest.fixture
def manager() -> UserManager:
    return session_manager()


@pytest.fixture
def unit_host(host_factory, manager):
    """A headless host whose driver is systemd, on the rig's manager; its units killed at the end."""
    made: list[HeadlessHost] = []

    def make(settings: dict | None = None, home: Path | None = None) -> HeadlessHost:
        host = host_factory(None if settings is None else {**settings, "driver": "systemd"}, home)
        host.env["XDG_RUNTIME_DIR"] = str(manager.runtime)
        made.append(host)
        return host

    yield make
    for host in made:
        if (family := unit_family(host.home)) is not None:
            manager.systemctl("kill", "--signal=SIGKILL", f"{family}*")


def unit_family(home: Path) -> str | None:
    try:
        return f"cadre-{json.loads((home / 'hosted-nodes.json').read_text())['home_id']}-"
    except (OSError, ValueError, KeyError):
        return None


def unit_of(node: dict) -> str:
    """The unit the node's process runs in, read from its cgroup (the `0::` line's last part)."""
    lines = Path(f"/proc/{node['pid']}/cgroup").read_text().splitlines()
    return next(line for line in lines if line.startswith("0::")).rsplit("/", 1)[1]


def kill_unit(manager: UserManager, unit: str) -> None:
    done = manager.systemctl("kill", "--kill-whom=main", "--signal=SIGKILL", unit)
    assert done.returncode == 0, done.stderr


# -- the rig ------------------------------------------------------------------------------------


def test_the_rig_moved_no_process_it_did_not_start(manager, unit_host):
    host = unit_host(fast_settings()).start()
    node = running_node(host, added(host)["id"])
    assert manager.before, "the census before the manager started saw no process: it would prove nothing"
    manager_pid = manager.proc.pid if manager.proc else 0
    assert any(f"/{manager.name}/" in line for line in Path(f"/proc/{manager_pid}/cgroup").read_text().splitlines())
    assert any(f"/{manager.name}/" in line for line in Path(f"/proc/{node['pid']}/cgroup").read_text().splitlines())
    assert manager.moved_others() == {}, "the rig's manager moved processes it did not start"
    host.stop()


def test_the_census_check_sees_a_process_moved_out_of_its_cgroup():
    """The proof above is proven to fail on a planted fault: one process of the census moved."""
    before = census()
    some = next(iter(before))
    started = before[some][0]
    planted = {**before, some: (started, "0::/somewhere-else")}
    assert moved(before, planted, "cadre-rig-x") == {some: (before[some], (started, "0::/somewhere-else"))}
    assert moved(before, {**before, some: (started, "0::/cadre-rig-x/app.slice")}, "cadre-rig-x") == {}
    assert moved(before, {**before, some: ("started 1", "0::/elsewhere")}, "cadre-rig-x") == {}, "a reused pid"


# -- supervision through units --------------------------------------------------------------------


def test_a_unit_killed_by_sigkill_is_respawned_with_its_attempt_counted(manager, unit_host):
    host = unit_host(fast_settings()).start()
    node = running_node(host, added(host)["id"])
    first = unit_of(node)
    assert re.fullmatch(rf"{unit_family(host.home)}{node['id']}-\d+\.service", first), first
    kill_unit(manager, first)
    after = running_node(host, node["id"], not_pid=node["pid"])
    assert after["attempts"] == 1
    second = unit_of(after)
    assert second != first and second.startswith(f"{unit_family(host.home)}{node['id']}-")
    assert manager.units(first) == [], "the crashed unit was left behind"
    assert after["caps"]["how"].startswith("systemd unit")
    host.stop()


def test_a_node_that_always_fails_in_its_unit_is_given_up_on(manager, unit_host):
    crash = [sys.executable, "-c", "import sys; print('node exploded: bad config', flush=True); sys.exit(1)"]
    host = unit_host(fast_settings(node_command=crash)).start()
    node = added(host)
    failed = wait_until(lambda: (n := host.node(node["id"]))["status"] == "error" and n, timeout=30, what="give-up")
    assert "gave up after 3 attempts: exited with code 1: node exploded: bad config" in failed["last_error"]
    assert not failed["running"]
    host.stop()


def test_a_unit_over_its_memory_cap_is_stopped_by_it_in_words(manager, unit_host):
    host = unit_host(fast_settings(node_command=HOG, node_memory_mb=64, respawn_max_attempts=1)).start()
    node = added(host)
    failed = wait_until(lambda: (n := host.node(node["id"]))["status"] == "error" and n, timeout=60,
                        what="the memory cap's kill")
    assert "stopped by its memory cap of 64 MB" in failed["last_error"], failed["last_error"]
    assert failed["caps"]["how"].startswith("systemd unit") and failed["caps"]["enforced"]
    host.stop()


def test_a_host_killed_and_started_again_reattaches_to_its_running_units(manager, unit_host):
    host = unit_host(fast_settings()).start()
    node = running_node(host, added(host)["id"])
    host.kill()
    assert psutil.pid_exists(node["pid"])
    again = unit_host(home=host.home).start()
    back = running_node(again, node["id"])
    assert back["pid"] == node["pid"] and back["attempts"] == 0
    again.stop()


def test_quit_leaving_nodes_running_leaves_their_units_and_the_next_host_adopts_them(manager, unit_host):
    host = unit_host(fast_settings(keep_nodes_running_on_quit=True)).start()
    node = running_node(host, added(host)["id"])
    unit = unit_of(node)
    assert host.stop() == 0
    assert manager.units(unit), "Quit leaving the nodes running ended their unit"
    assert psutil.pid_exists(node["pid"])
    again = unit_host(home=host.home).start()
    back = running_node(again, node["id"])
    assert back["pid"] == node["pid"] and back["attempts"] == 0
    assert manager.units(unit) == [unit]
    again.stop()


def test_remove_leaves_no_unit_and_no_cgroup(manager, unit_host):
    host = unit_host(fast_settings()).start()
    node = running_node(host, added(host)["id"])
    unit = unit_of(node)
    assert manager.unit_cgroups(unit), "the unit's cgroup was not found: the check would prove nothing"
    status, body = host.api("DELETE", f"/api/nodes/{node['id']}")
    assert status in (200, 202, 204), body
    wait_until(lambda: not manager.units(f"{unit_family(host.home)}*"), timeout=20, what="no unit left")
    wait_until(lambda: not manager.unit_cgroups(unit), timeout=20, what="no cgroup left")
    assert not psutil.pid_exists(node["pid"])
    host.stop()


# -- secrets ----------------------------------------------------------------------------------------


def test_no_secret_in_a_units_properties_environment_or_command_line(manager, unit_host):
    host = unit_host(fast_settings()).start()
    node = running_node(host, added(host)["id"])
    for start in range(2):
        secret = node["claim_url"].split("#", 1)[1]
        assert len(secret) >= 16
        unit = unit_of(node)
        shown = manager.show(unit)
        assert "CADRE_NODE_ID" in shown, "systemctl show printed no environment: the check would prove nothing"
        assert secret not in shown
        assert "CLAIM_SECRET" not in shown and "HOST_TOKEN" not in shown
        transient = manager.runtime / "systemd" / "transient" / unit  # the file the manager keeps of the unit
        assert "CADRE_NODE_ID" in transient.read_text(errors="replace")
        assert secret not in transient.read_text(errors="replace")
        environ = Path(f"/proc/{node['pid']}/environ").read_bytes()
        cmdline = Path(f"/proc/{node['pid']}/cmdline").read_bytes()
        assert b"CADRE_NODE_ID" in environ
        assert secret.encode() not in environ and secret.encode() not in cmdline
        if start == 0:
            kill_unit(manager, unit)
            node = running_node(host, node["id"], not_pid=node["pid"])
    host.stop()


# -- the driver alone ---------------------------------------------------------------------------------


async def test_a_lost_connection_to_the_manager_tells_every_unit_ended_and_starts_fail_in_words(manager, tmp_path):
    from cadre_desktop.errors import SpawnError
    from cadre_desktop.host.systemd.driver import SystemdDriver
    from tests.support.driver_contract import SystemdRig

    rig = SystemdRig(tmp_path / "home", manager)
    try:
        driver = rig.new_driver()
        await driver.init()
        info = await rig.started("n1")
        assert isinstance(driver, SystemdDriver)
        connection = driver.bus._bus
        assert connection is not None
        connection.disconnect()  # as when the bus goes away: not the driver's own disconnect
        exit_ = await rig.wait_exit(info)
        assert (exit_.node_id, exit_.returncode, exit_.requested) == ("n1", None, False)
        with pytest.raises(SpawnError) as err:
            await driver.start("n1", 2, {"CADRE_CLAIM_SECRET": "x" * 24})
        assert "not connected" in str(err.value)
    finally:
        rig.cleanup()


async def test_a_node_program_that_cannot_be_executed_fails_its_start_and_leaves_no_unit(manager, tmp_path):
    from cadre_desktop.errors import SpawnError
    from tests.support.driver_contract import SystemdRig

    rig = SystemdRig(tmp_path / "home", manager)
    try:
        driver = rig.new_driver()
        await driver.init()
        driver.reconfigure(rig.config(("/nonexistent/cadre-node",), rig.port_range))
        with pytest.raises(SpawnError) as err:
            await driver.start("n1", 1, {"CADRE_CLAIM_SECRET": "x" * 24})
        assert "could not start the node program '/nonexistent/cadre-node'" in str(err.value)
        assert driver.handles_for("n1") == [] and rig.exits == []
        await rig.wait_running("n1", 0)
        assert manager.units(f"cadre-{rig.home_id}-*") == []
    finally:
        rig.cleanup()


async def test_a_start_of_an_attempt_whose_unit_runs_unlisted_adopts_it(manager, tmp_path):
    """A host that died right after asking for a unit, and a new host whose books do not list it yet."""
    from cadre_desktop.host.systemd.driver import SystemdDriver
    from tests.support.driver_contract import SystemdRig

    rig = SystemdRig(tmp_path / "home", manager)
    try:
        first = rig.new_driver()
        await first.init()
        info = await rig.started("n1", attempt=7)
        first.close()
        second = rig.new_driver()
        assert isinstance(second, SystemdDriver)
        await second.bus.connect()  # no `init`: its books are empty
        adopted = await second.start("n1", 7, {"CADRE_CLAIM_SECRET": "x" * 24})
        assert adopted.adopted and adopted.id == info.id and adopted.pid == info.pid
        assert rig.running("n1") == 1 and second.is_running(adopted.id)
    finally:
        rig.cleanup()


async def test_a_capped_unit_killed_by_sigkill_is_a_crash_not_its_memory_cap(manager, tmp_path):
    """On cgroup v1 the kernel also signals the memory cap's eventfd when the cgroup goes: never a cap's kill."""
    from cadre_desktop.host.core.driver import NodeCaps
    from cadre_desktop.host.drivers import make_systemd_driver
    from tests.support.driver_contract import SystemdRig

    rig = SystemdRig(tmp_path / "home", manager)
    rig.build = lambda: make_systemd_driver(  # type: ignore[method-assign]
        rig.settings, rig.paths, lambda: "127.0.0.1", caps_for=lambda _n: NodeCaps(memory_mb=256),
        home_id=rig.home_id, address=manager.address)
    try:
        driver = rig.new_driver()
        await driver.init()
        info = await rig.started("n1")
        assert driver.caps_enforcement(NodeCaps(memory_mb=256)).how == "systemd unit (MemoryMax, Nice)"
        code = await rig.crash(info)
        exit_ = await rig.wait_exit(info)
        assert (exit_.returncode, exit_.cause) == (code, None)
    finally:
        rig.cleanup()


async def test_a_unit_that_ignores_its_stop_is_killed_at_the_stop_timeout(manager, tmp_path):
    """`StopUnit` is bounded by the host's stop timeout (2 s here), then `KillUnit` SIGKILL: well before the
    manager's own kill (the timeout and 5 s)."""
    import time

    from cadre_desktop.host.core.driver import DriverStatus
    from tests.support.driver_contract import SystemdRig

    stubborn = (sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('ignoring SIGTERM', flush=True); time.sleep(600)")
    rig = SystemdRig(tmp_path / "home", manager)
    try:
        driver = rig.new_driver()
        await driver.init()
        driver.reconfigure(rig.config(stubborn, rig.port_range))
        info = await rig.start("n1", 1)
        await async_wait_until(lambda: "ignoring SIGTERM" in driver.log_tail("n1"), timeout=15, what="SIGTERM ignored")
        assert driver.is_running(info.id)
        began = time.monotonic()
        await driver.stop(info.id)
        took = time.monotonic() - began
        assert 1.9 <= took < 6.0, took
        assert driver.status(info.id) is DriverStatus.STOPPED
        exit_ = await rig.wait_exit(info)
        assert exit_.requested and exit_.returncode == -9
        await rig.wait_running("n1", 0)
    finally:
        rig.cleanup()
