"""The driver contract: what every driver (host/core/driver.NodeDriver) must do, run against each.

The `contract_rig` fixture yields one rig per driver (tests/support/driver_contract.py):
the local driver built by `make_driver` running the real reference node, and the fake
the supervision tests use. A new driver is added to `host/drivers.py` and to the rigs,
and passes this file (docs/drivers.md).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from cadre_desktop.errors import InputError, SettingsError, SpawnError
from cadre_desktop.host.core.driver import DriverStatus, Exit, NodeDriver
from cadre_desktop.host.drivers import make_driver
from cadre_desktop.paths import Paths
from cadre_desktop.settings import DRIVERS, Settings, load_settings
from tests.support.driver_contract import MARKED_COMMAND, DriverRig, claim_env
from tests.support.polling import async_wait_until

# -- start, status, stop, exits -------------------------------------------------------------


async def test_a_start_is_a_running_instance_on_the_node_contracts_ports(contract_rig: DriverRig):
    driver = contract_rig.new_driver()
    assert isinstance(driver, NodeDriver)
    await driver.init()
    info = await contract_rig.started("n1", attempt=1)
    assert info.node_id == "n1" and info.attempt == 1 and not info.adopted
    assert info.alive and info.returncode is None
    assert info.api_port != info.p2p_port
    assert all(0 < port < 65536 for port in (info.api_port, info.p2p_port))
    assert driver.status(info.id) is DriverStatus.RUNNING and driver.is_running(info.id)
    assert contract_rig.running("n1") == 1
    assert contract_rig.exits == []


async def test_a_stop_is_stopped_and_one_requested_exit(contract_rig: DriverRig):
    driver = contract_rig.new_driver()
    await driver.init()
    info = await contract_rig.started("n1")
    unheard: list[Exit] = []
    driver.subscribe(unheard.append)()  # unsubscribed at once: told nothing
    await driver.stop(info.id)
    assert driver.status(info.id) is DriverStatus.STOPPED
    assert not driver.is_running(info.id)
    exit_ = await contract_rig.wait_exit(info)
    assert (exit_.node_id, exit_.pid, exit_.requested) == ("n1", info.pid, True)
    await contract_rig.wait_running("n1", 0)
    await driver.stop(info.id)  # a second stop of an ended instance is a no-op
    assert len(contract_rig.exits_of(info)) == 1, contract_rig.exits
    assert unheard == []


async def test_a_crash_is_failed_and_one_unrequested_exit_with_its_code(contract_rig: DriverRig):
    driver = contract_rig.new_driver()
    await driver.init()
    info = await contract_rig.started("n1")
    code = await contract_rig.crash(info)
    exit_ = await contract_rig.wait_exit(info)
    assert (exit_.node_id, exit_.pid, exit_.requested, exit_.returncode) == ("n1", info.pid, False, code)
    await contract_rig.wait_status(info, DriverStatus.FAILED)
    assert not driver.is_running(info.id)
    ended = driver.get(info.id)
    assert ended is not None and ended.returncode == code
    await driver.stop(info.id)  # stopping what already died tells nothing more
    assert driver.status(info.id) is DriverStatus.FAILED
    assert len(contract_rig.exits_of(info)) == 1, contract_rig.exits


# -- the attempt key ----------------------------------------------------------------------


async def test_the_same_attempt_again_adopts_the_live_instance(contract_rig: DriverRig):
    driver = contract_rig.new_driver()
    await driver.init()
    first = await contract_rig.started("n1", attempt=3)
    again = await contract_rig.start("n1", 3)
    assert again.id == first.id and again.pid == first.pid and again.adopted
    assert [h.id for h in driver.handles_for("n1")] == [first.id]
    assert contract_rig.running("n1") == 1
    assert driver.is_running(first.id)


async def test_a_new_attempt_replaces_the_live_instance(contract_rig: DriverRig):
    driver = contract_rig.new_driver()
    await driver.init()
    first = await contract_rig.started("n1", attempt=1)
    second = await contract_rig.started("n1", attempt=2)
    assert second.id != first.id and not second.adopted and second.attempt == 2
    assert [h.id for h in driver.handles_for("n1")] == [second.id]
    assert not driver.is_running(first.id) and driver.status(first.id) is not DriverStatus.RUNNING
    assert driver.is_running(second.id)
    await contract_rig.wait_running("n1", 1)
    assert not [e for e in contract_rig.exits_of(first) if not e.requested], "a replaced instance told as a crash"


async def test_a_stop_of_the_node_waits_for_its_start_in_flight_and_stops_its_instance(contract_rig: DriverRig):
    driver, release, start = await contract_rig.start_held("n1")
    stop = asyncio.create_task(driver.stop_node("n1"))  # a Remove or Restart landing while the child comes up
    release()
    info, _ = await asyncio.gather(start, stop)
    assert not driver.is_running(info.id), "the stop missed the instance its node's start brought"
    await contract_rig.wait_running("n1", 0)


async def test_a_driver_closed_while_a_start_is_in_flight_leaves_no_instance(contract_rig: DriverRig):
    driver, release, start = await contract_rig.start_held("n1")
    driver.close()  # the host goes away while the child comes up: nobody would track it
    release()
    with pytest.raises(SpawnError):
        await start
    await contract_rig.wait_running("n1", 0)


async def test_a_cancelled_start_leaves_no_instance(contract_rig: DriverRig):
    driver, release, start = await contract_rig.start_held("n1")
    start.cancel()  # a pass cancelled by the host's stop
    release()
    with pytest.raises(asyncio.CancelledError):
        await start
    await contract_rig.wait_running("n1", 0)
    assert driver.handles_for("n1") == []
    again = await contract_rig.started("n1", attempt=2)  # the node is not stuck in flight
    assert driver.is_running(again.id)


async def test_a_start_after_a_crash_keeps_the_ports_it_asks_for(contract_rig: DriverRig):
    driver = contract_rig.new_driver()
    await driver.init()
    first = await contract_rig.started("n1", attempt=1)
    await contract_rig.crash(first)
    await contract_rig.wait_status(first, DriverStatus.FAILED)
    remembered = (first.api_port, first.p2p_port)
    other = await contract_rig.start("n2", 1, avoid_ports=remembered)  # another node leaves them to their owner
    assert {other.api_port, other.p2p_port}.isdisjoint(remembered)
    second = await contract_rig.started("n1", attempt=2, want_ports=remembered)
    assert (second.api_port, second.p2p_port) == remembered
    assert [h.id for h in driver.handles_for("n1")] == [second.id] and driver.is_running(second.id)


async def test_the_queries_agree(contract_rig: DriverRig):
    driver = contract_rig.new_driver()
    await driver.init()
    one = await contract_rig.started("n1")
    two = await contract_rig.started("n2")
    assert {h.id for h in driver.list_nodes()} == {one.id, two.id}
    assert [h.id for h in driver.handles_for("n1")] == [one.id]
    assert [h.id for h in driver.handles_for("n2")] == [two.id]
    assert driver.handles_for("n3") == []
    got_one, got_two = driver.get(one.id), driver.get(two.id)
    assert got_one is not None and got_one.id == one.id and got_two is not None and got_two.node_id == "n2"
    assert driver.is_running(one.id) and driver.is_running(two.id)
    await contract_rig.crash(one)
    await contract_rig.wait_status(one, DriverStatus.FAILED)
    assert not driver.is_running(one.id) and driver.is_running(two.id)
    assert {h.id for h in driver.list_nodes()} == {one.id, two.id}, "an ended instance is still listed until replaced"
    assert driver.get(None) is None and driver.get("no-such-handle") is None
    assert not driver.is_running(None) and not driver.is_running("no-such-handle")
    assert driver.status(None) is DriverStatus.UNKNOWN
    assert driver.status("no-such-handle") is DriverStatus.GONE


async def test_stopping_an_unknown_or_no_handle_does_nothing(contract_rig: DriverRig):
    driver = contract_rig.new_driver()
    await driver.init()
    info = await contract_rig.started("n1")
    await driver.stop(None)
    await driver.stop("no-such-handle")
    await driver.stop_node("no-such-node")
    await driver.remove_node("no-such-node")
    assert driver.is_running(info.id) and contract_rig.running("n1") == 1
    assert contract_rig.exits == []


async def test_stop_node_stops_it_and_remove_node_forgets_it(contract_rig: DriverRig):
    driver = contract_rig.new_driver()
    await driver.init()
    one = await contract_rig.started("n1")
    two = await contract_rig.started("n2")
    said = await contract_rig.node_output(one)
    await async_wait_until(lambda: any(said in line for line in driver.log_tail("n1")), what="the node's line")
    await driver.stop_node("n1")
    assert driver.status(one.id) is DriverStatus.STOPPED
    assert [e.requested for e in contract_rig.exits] == [True]
    await driver.remove_node("n1")
    assert driver.handles_for("n1") == [] and driver.get(one.id) is None
    assert driver.status(one.id) is DriverStatus.GONE
    assert driver.log_tail("n1") == [], "a removed node's log is gone with it"
    await driver.remove_node("n2")  # a running node: stopped, then forgotten
    assert driver.list_nodes() == [] and driver.status(two.id) is DriverStatus.GONE
    assert [(e.node_id, e.requested) for e in contract_rig.exits] == [("n1", True), ("n2", True)]
    await contract_rig.wait_running("n2", 0)
    assert contract_rig.running("n1") == 0


async def test_log_tail_is_the_nodes_output(contract_rig: DriverRig):
    driver = contract_rig.new_driver()
    await driver.init()
    info = await contract_rig.started("n1")
    said = await contract_rig.node_output(info)
    await async_wait_until(lambda: any(said in line for line in driver.log_tail("n1")), what="the node's line")
    assert len(driver.log_tail("n1", lines=1)) == 1
    assert all("\n" not in line for line in driver.log_tail("n1"))
    assert driver.log_tail("n2") == []
    driver.trim_logs()
    assert any(said in line for line in driver.log_tail("n1"))


# -- the host's start, stop and settings ----------------------------------------------------


async def test_a_fresh_home_attaches_nothing_and_a_new_driver_reattaches_what_runs(contract_rig: DriverRig):
    first = contract_rig.new_driver()
    report = await first.init()
    assert list(report.attached) == [] and report.stopped_cleanly == frozenset()
    info = await contract_rig.started("n1", attempt=4)
    told_after_close: list[Exit] = []
    first.subscribe(told_after_close.append)
    first.close()  # the host goes away; the instance stays
    assert contract_rig.running("n1") == 1
    with pytest.raises(SpawnError):
        await first.start("n2", 1, claim_env())  # a closed driver starts nothing
    second = contract_rig.new_driver()
    report = await second.init()
    assert [h.id for h in report.attached] == [info.id] and report.stopped_cleanly == frozenset()
    assert second.is_running(info.id) and second.status(info.id) is DriverStatus.RUNNING
    adopted = await contract_rig.start("n1", 4)
    assert adopted.id == info.id and adopted.adopted, "the re-attached instance was not adopted by its attempt"
    assert contract_rig.running("n1") == 1
    code = await contract_rig.crash(adopted)  # a re-attached instance's exit is still told
    exit_ = await contract_rig.wait_exit(info)
    # Its code, or None where the driver cannot know it (a local child re-attached is not its to reap).
    assert not exit_.requested and exit_.returncode in (code, None)
    await contract_rig.wait_status(info, DriverStatus.FAILED)
    assert told_after_close == [], "a closed driver still told an exit"


async def test_an_instance_that_ended_while_no_host_watched_is_gone_and_not_adopted(contract_rig: DriverRig):
    first = contract_rig.new_driver()
    await first.init()
    info = await contract_rig.started("n1", attempt=5)
    first.close()
    contract_rig.crash_unwatched(info)
    second = contract_rig.new_driver()
    report = await second.init()
    assert list(report.attached) == [] and report.stopped_cleanly == frozenset()
    assert second.status(info.id) is DriverStatus.GONE and not second.is_running(info.id)
    again = await contract_rig.started("n1", attempt=5)
    assert again.id != info.id and not again.adopted, "a dead instance was adopted"
    assert second.is_running(again.id) and contract_rig.running("n1") == 1
    assert contract_rig.exits == []


async def test_stop_all_stops_everything_and_the_next_init_says_so_once(contract_rig: DriverRig):
    first = contract_rig.new_driver()
    await first.init()
    one = await contract_rig.started("n1")
    two = await contract_rig.started("n2")
    await first.stop_all()
    assert not first.is_running(one.id) and not first.is_running(two.id)
    assert sorted((e.node_id, e.requested) for e in contract_rig.exits) == [("n1", True), ("n2", True)]
    await contract_rig.wait_running("n1", 0)
    await contract_rig.wait_running("n2", 0)
    first.close()
    report = await contract_rig.new_driver().init()
    assert list(report.attached) == []
    assert report.stopped_cleanly == frozenset({"n1", "n2"})
    contract_rig.driver.close()
    assert (await contract_rig.new_driver().init()).stopped_cleanly == frozenset(), "the clean-quit list is read once"


async def test_reconfigure_makes_the_next_start_run_the_new_command(contract_rig: DriverRig):
    driver = contract_rig.new_driver()
    await driver.init()
    before = await contract_rig.started("n1", attempt=1)
    assert "cadre_contract_mark" not in contract_rig.command_of(before)
    driver.reconfigure(contract_rig.config(MARKED_COMMAND, contract_rig.other_port_range))
    assert driver.is_running(before.id), "a reconfigure ends no running instance"
    after = await contract_rig.started("n1", attempt=2)
    assert "cadre_contract_mark" in contract_rig.command_of(after)
    low, high = contract_rig.other_port_range
    assert low <= after.api_port <= high and low <= after.p2p_port <= high


# -- choosing a driver ------------------------------------------------------------------------


def test_make_driver_refuses_a_driver_it_does_not_know(tmp_path):
    with pytest.raises(InputError) as err:
        make_driver(Settings(driver="nope"), Paths(tmp_path, tmp_path, tmp_path / "logs"), lambda: "127.0.0.1")
    assert "'nope'" in str(err.value) and all(name in str(err.value) for name in DRIVERS)


def test_settings_naming_an_unknown_driver_is_an_error_naming_the_key(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"driver": "nope"}))
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    words = str(err.value)
    assert "'driver'" in words and str(path) in words and "'local'" in words and '"nope"' in words
    path.write_text(json.dumps({"driver": "local"}))
    assert load_settings(path).driver == "local"
