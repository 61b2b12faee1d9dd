"""The rules of the second supervision core, each alone, on a fake clock and a fake driver:
the keyring as a host condition, start marks and the start grace, hopeless exits,
adopted starts, clean quits, regenerate and remove races, the monotonic clock."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from cadre_desktop.errors import InvalidState, SecretsError, StorageError
from cadre_desktop.host.core.driver import DriverStatus, NodeDriver
from cadre_desktop.host.core.events import EventKind
from cadre_desktop.host.core.records.records import NodeStatus, StartMark
from cadre_desktop.host.core.records.store import RecordStore
from cadre_desktop.host.core.supervision.decide import Decision, Observation, Policy, SecretState, decide
from cadre_desktop.host.core.supervision.probe import STEADY_FACTOR
from cadre_desktop.host.core.vault.keyring_gate import RETRY_FIRST_S, RETRY_MAX_S
from cadre_desktop.host.core.vault.secrets import SERVICE, SecretKind
from cadre_desktop.host.local.orchestrator import Orchestrator
from cadre_desktop.settings import Settings
from tests.support.clock import settle
from tests.support.fake_driver import FakeOrchestrator
from tests.support.keyrings import HangingKeyring, LockedKeyring
from tests.support.polling import async_wait_until
from tests.support.rig import Rig


def test_the_fake_and_the_local_driver_both_implement_the_driver_protocol():
    assert isinstance(FakeOrchestrator(), NodeDriver)
    assert all(hasattr(Orchestrator, name) for name in ("start", "status", "stop", "subscribe", "remove_node"))


# -- the keyring is a host condition ----------------------------------------------------

async def test_locked_keyring_counts_no_attempt_and_the_node_waits_for_it(tmp_path):
    rig = Rig(tmp_path, keyring=LockedKeyring())
    rig.node(cached=False)
    for _ in range(8):
        await rig.sup.reconcile()
        await rig.clock.run_for(60)
    rec = rig.present_rec()
    assert rec.status is NodeStatus.JOINED and rec.attempts == 0
    assert rig.sup.waiting_for_keyring("n1")
    assert rig.orch.spawned == []
    await async_wait_until(lambda: rig.gate.condition is not None, what="the gate heard the keyring refuse")
    assert rig.gate.condition is not None and rig.gate.condition.code == "keyring_locked"
    assert rig.sup.decisions.last["n1"]["decision"] == "waiting-for-keyring"
    assert EventKind.GAVE_UP not in rig.kinds()
    await rig.close()


async def test_failing_keyring_counts_no_attempt(tmp_path):
    class Failing(LockedKeyring):
        def get_password(self, service, username):
            raise RuntimeError("dbus said no")
    rig = Rig(tmp_path, keyring=Failing())
    rig.node(cached=False)
    await rig.sup.reconcile()
    await async_wait_until(lambda: rig.gate.condition is not None, what="the gate tried the keyring")
    await rig.sup.reconcile()
    assert rig.present_rec().attempts == 0 and rig.orch.spawned == []
    await rig.close()


async def test_waiting_nodes_start_the_moment_the_keyring_answers(tmp_path):
    rig = Rig(tmp_path, keyring=LockedKeyring())
    rig.node(cached=False)
    rig.sup.start()
    await async_wait_until(lambda: rig.sup.waiting_for_keyring("n1"), what="waiting for the keyring")
    # The gate's refused read returns from its thread in its own time: the retry's sleep is on the
    # clock only once it has (a CI run beside another suite moved the clock first, and the retry,
    # due 5 s after the advance, never came).
    await async_wait_until(lambda: rig.gate.condition is not None, what="the gate heard the keyring refuse")
    await settle()  # its fetcher goes on to the retry's sleep
    rig.keyring.locked = False  # the same items, unlocked
    await rig.clock.run_for(RETRY_FIRST_S)  # the gate's first retry
    await async_wait_until(lambda: rig.orch.spawns_of("n1"), what="started once the keyring answered")
    assert rig.present_rec().attempts == 1 and not rig.sup.waiting_for_keyring("n1")
    await rig.close()


async def test_a_hung_keyring_read_holds_up_no_other_nodes_retry_or_restart(tmp_path):
    keyring = HangingKeyring()
    rig = Rig(tmp_path, keyring=keyring, keyring_timeout_s=0.05)
    rig.node("waits", cached=False)  # its read will hang
    rig.node("broken", status=NodeStatus.ERROR, live=False)
    rig.node("alive", live=True)
    rig.sup.start()
    await async_wait_until(lambda: rig.sup.waiting_for_keyring("waits"), what="the hung node waits")
    await async_wait_until(lambda: rig.secrets.hung, what="the read hangs")
    # While the read hangs, other nodes' actions go through the serial queue at once.
    retried = await asyncio.wait_for(rig.service.retry("broken"), 2)
    assert retried.status is NodeStatus.UNCLAIMED and rig.orch.is_running(retried.handle)
    restarted = await asyncio.wait_for(rig.service.restart("alive"), 2)
    assert restarted is not None and rig.orch.is_running(restarted.handle)
    assert rig.present_rec("waits").attempts == 0
    # The prompt is answered: the waiting node starts.
    keyring.release.set()
    await async_wait_until(lambda: rig.orch.spawns_of("waits"), what="start after the keyring answered")
    await rig.close()


async def test_a_secret_truly_missing_from_a_working_keyring_is_a_failure(rig):
    """Missing once two reads, CONFIRM_S apart, agree; after the first, the node only waits."""
    rig.node(cached=False)
    del rig.keyring.items[(SERVICE, "n1/claim-secret")]
    await rig.gate.prefetch([("n1", SecretKind.CLAIM)])
    await rig.sup.reconcile()
    assert rig.rec().status is NodeStatus.JOINED and rig.sup.waiting_for_keyring("n1")
    await rig.clock.run_for(RETRY_FIRST_S)  # the gate reads again by itself
    await async_wait_until(lambda: rig.gate.is_missing("n1", SecretKind.CLAIM), what="the second read")
    await rig.sup.reconcile()
    assert rig.rec().status is NodeStatus.ERROR and "missing from the keyring" in rig.rec().error


async def test_one_empty_answer_of_a_slow_keyring_is_never_taken_for_a_missing_secret(rig):
    """An empty answer (a keyring still loading, a slow bus), then the secret: the node starts,
    never given up on."""
    rig.node(cached=False)
    kept = rig.keyring.items.pop((SERVICE, "n1/claim-secret"))
    await rig.gate.prefetch([("n1", SecretKind.CLAIM)])
    await rig.sup.reconcile()
    assert not rig.gate.is_missing("n1", SecretKind.CLAIM) and rig.rec().status is NodeStatus.JOINED
    rig.keyring.items[(SERVICE, "n1/claim-secret")] = kept  # the keyring caught up
    await rig.clock.run_for(RETRY_FIRST_S)
    await async_wait_until(lambda: rig.gate.cached("n1", SecretKind.CLAIM), what="the second read")
    await rig.sup.reconcile()
    assert rig.orch.spawns_of("n1") and rig.rec().status is not NodeStatus.ERROR


async def test_the_gate_finishes_a_delete_the_locked_keyring_refused_once_it_is_unlocked(tmp_path):
    """Nothing else asks the keyring meanwhile: the gate probes again by itself."""
    rig = Rig(tmp_path, keyring=LockedKeyring())
    rig.keyring.items[(SERVICE, "gone/claim-secret")] = "x" * 43
    rig.keyring.locked = True
    with pytest.raises(SecretsError):
        await rig.gate.forget("gone", (SecretKind.CLAIM,))
    assert rig.gate.pending_deletes == {"gone": {SecretKind.CLAIM}} and rig.gate.condition is not None
    await rig.clock.run_for(RETRY_FIRST_S)
    assert (SERVICE, "gone/claim-secret") in rig.keyring.items  # still locked: still there, still pending
    rig.keyring.locked = False
    for _ in range(3):
        await rig.clock.run_for(RETRY_MAX_S)
    await async_wait_until(lambda: rig.gate.condition is None, what="the gate probing the unlocked keyring")
    assert (SERVICE, "gone/claim-secret") not in rig.keyring.items and rig.gate.pending_deletes == {}
    await rig.close()


async def test_retry_with_a_locked_keyring_says_so_and_changes_nothing(tmp_path):
    rig = Rig(tmp_path, keyring=LockedKeyring())
    rig.node(status=NodeStatus.ERROR, cached=False)
    with pytest.raises(SecretsError, match="locked"):
        await rig.service.retry("n1")
    assert rig.present_rec().status is NodeStatus.ERROR and rig.orch.spawned == []
    await rig.close()


# -- clean quit --------------------------------------------------------------------------

async def test_clean_quit_at_the_cap_starts_again_instead_of_giving_up(rig):
    rig.node("capped", attempts=5, ago_s=1)
    rig.sup.start(stopped_cleanly=frozenset({"capped"}))
    await async_wait_until(lambda: rig.orch.spawns_of("capped"), what="start-up pass")
    rec = rig.rec("capped")
    assert rec.status is NodeStatus.JOINED and rec.attempts == 5
    assert EventKind.GAVE_UP not in rig.kinds()


async def test_clean_quit_inside_a_backoff_starts_at_once(rig):
    rig.node("backing-off", attempts=3, ago_s=1)  # 40 s of backoff left
    rig.sup.start(stopped_cleanly=frozenset({"backing-off"}))
    await async_wait_until(lambda: rig.orch.spawns_of("backing-off"), what="start-up pass")
    assert rig.rec("backing-off").attempts == 3


# -- start grace ------------------------------------------------------------------------

async def test_slow_starter_inside_its_grace_is_left_alone(rig):
    rig.node(live=True, answered=False)
    await rig.sup.reconcile()  # first sight
    await rig.clock.run_for(14.5)
    await rig.sup.reconcile()
    assert rig.orch.stopped == []
    assert rig.sup.decisions.last["n1"]["decision"] == "starting"


async def test_slow_starter_past_its_grace_is_a_failed_start_with_its_reason(rig):
    rec = rig.node(live=True, answered=False)
    await rig.sup.reconcile()
    await rig.clock.run_for(15)
    await rig.sup.reconcile()
    assert rig.orch.stopped == [rec.handle]
    await rig.sup.reconcile()  # the stop raised an exit: the crash path starts it again, counted
    after = rig.rec()
    assert after.attempts == 1 and after.start.failures == 1
    assert after.start.last_exit == "never answered within 15 s"


async def test_the_start_grace_doubles_per_failed_start_up_to_its_cap():
    policy = Policy(Settings(start_grace_ms=15_000, start_grace_max_ms=60_000))
    assert [policy.grace_s(n) for n in range(5)] == [15, 30, 60, 60, 60]
    assert Policy(Settings(start_grace_ms=0)).grace_s(3) == 0


async def test_a_doubled_grace_protects_a_slow_starter_that_failed_before(rig):
    rig.node(live=True, answered=False, mark=StartMark(attempt=0, at="2026-01-01T00:00:00Z", failures=2))
    await rig.sup.reconcile()
    await rig.clock.run_for(59)  # 15 s doubled twice is 60 s
    await rig.sup.reconcile()
    assert rig.orch.stopped == []
    await rig.clock.run_for(1)
    await rig.sup.reconcile()
    assert rig.orch.stopped


async def test_a_start_that_answers_spends_its_mark(rig):
    rig.node(live=True, answered=False, mark=StartMark(attempt=0, at="2026-01-01T00:00:00Z", failures=3))
    rig.answers.by_port[rig.orch.get(rig.rec().handle).api_port] = {"state": "joined", "peer_id": "p"}
    await rig.probe.probe_all()
    assert not rig.rec().start.answered  # the probe only observes: the pass writes
    await rig.sup.reconcile()
    assert rig.rec().start.answered
    rig.orch.exit(rig.rec().handle)
    await rig.sup.reconcile()
    assert rig.rec().start.failures == 0  # the next start counts from zero


async def test_a_node_that_answered_and_went_silent_is_stopped_as_hung(rig):
    rec = rig.node(live=True)
    rig.answers.by_port[rig.orch.get(rec.handle).api_port] = {"state": "joined"}
    await rig.probe.probe_all()
    rig.answers.by_port.clear()
    await rig.clock.run_for(3 * rig.probe.interval_s * STEADY_FACTOR + 1)  # silent past three of its steady periods
    await rig.probe.probe_all()
    await rig.sup.reconcile()
    assert rig.orch.stopped == [rec.handle]
    assert rig.sup.decisions.last["n1"]["decision"] == "hung"


async def test_a_slow_starter_given_up_on_says_it_never_answered(tmp_path):
    rig = Rig(tmp_path, respawn_max_attempts=1)
    rig.node(live=True, answered=False, attempts=1, ago_s=100)
    await rig.sup.reconcile()
    await rig.clock.run_for(15)
    await rig.sup.reconcile()  # stalled: stopped
    await rig.sup.reconcile()  # down with the budget spent
    assert rig.present_rec().status is NodeStatus.ERROR
    assert (rig.present_rec().error or "").startswith("gave up after 1 attempt: never answered within 15 s")
    await rig.close()


# -- exits ----------------------------------------------------------------------------

@pytest.mark.parametrize("code", [2, 4, 5])
async def test_an_exit_retrying_will_not_fix_gives_up_at_once_with_the_nodes_own_line(rig, code):
    rec = rig.node(live=True)
    rig.orch.logs["n1"] = ["starting", "cadre-node: error: cannot open /dev/ttyUSB0"]
    rig.sup._unsubscribe = rig.orch.subscribe(rig.sup._on_exit)
    rig.orch.exit(rec.handle, code=code)
    await rig.sup.reconcile()
    after = rig.rec()
    assert after.status is NodeStatus.ERROR and rig.orch.spawned == []
    assert f"exited with code {code}: cadre-node: error: cannot open /dev/ttyUSB0" in after.error
    assert after.error.startswith("gave up:")


async def test_an_exit_is_an_event_at_once_with_code_and_last_line(rig):
    rec = rig.node(live=True, attempts=1, ago_s=1)
    rig.orch.logs["n1"] = ["boom: \x1b[31mdisk\x1b[0m full"]
    rig.sup._unsubscribe = rig.orch.subscribe(rig.sup._on_exit)
    rig.orch.exit(rec.handle, code=1)
    exited = [e for e in rig.seen if e.kind is EventKind.EXITED]
    assert len(exited) == 1 and exited[0].detail.startswith("exited with code 1: boom:")
    assert "\x1b" not in exited[0].detail
    assert rig.sup.last_exit("n1") == exited[0].detail


async def test_a_requested_stop_is_no_exit_event(rig):
    rec = rig.node(live=True)
    rig.sup._unsubscribe = rig.orch.subscribe(rig.sup._on_exit)
    await rig.orch.stop(rec.handle)
    assert EventKind.EXITED not in rig.kinds()


def test_decision_table_of_a_down_node():
    from cadre_desktop.host.core.records.records import NodeRecord, RespawnInfo
    rec = NodeRecord(id="n", name="n", status=NodeStatus.JOINED, handle="h", respawn=RespawnInfo(2, "x"))
    policy = Policy(Settings())
    down = Observation(status=DriverStatus.FAILED, since_attempt_s=5)
    assert decide(rec, down, policy).decision is Decision.WAIT
    assert decide(rec, Observation(status=DriverStatus.FAILED, since_attempt_s=20), policy).decision is Decision.START
    waiting = Observation(status=DriverStatus.FAILED, since_attempt_s=20, secret=SecretState.WAITING)
    assert decide(rec, waiting, policy).decision is Decision.WAIT_KEYRING


# -- adopted start, marks across restarts ----------------------------------------------

async def test_a_start_of_the_same_attempt_adopts_the_child_it_already_made(rig):
    rec = rig.node(live=False, mark=StartMark(attempt=3, at="2026-01-01T00:00:00Z", answered=True))
    # The host died after starting attempt 4 and before writing the record.
    orphan = rig.orch.spawn("n1", {}, attempt=4)
    rig.orch.handles[rec.handle] = rig.orch.add_live("n1", rec.handle)
    rig.orch.handles[rec.handle].alive = False
    assert (await rig.orch.start("n1", 4, {})).id == orphan.id and orphan.adopted
    await rig.sup.reconcile()
    assert rig.rec().handle == orphan.id and rig.rec().attempts == 0
    assert len(rig.orch.spawned) == 1  # nothing started beside it


async def test_the_start_mark_survives_a_host_restart(rig, tmp_path):
    rig.node(attempts=1, ago_s=60)
    rig.orch.logs["n1"] = ["cannot open /dev/ttyUSB0"]
    rig.sup.exits.stopped("n1", "exited with code 1: cannot open /dev/ttyUSB0")
    await rig.sup.reconcile()
    mark = rig.rec().start
    reread_rec = RecordStore(tmp_path / "hosted-nodes.json").get("n1")
    assert reread_rec is not None
    reread = reread_rec.start
    assert reread == mark
    assert mark.attempt == 1 and mark.by and mark.last_exit == "exited with code 1: cannot open /dev/ttyUSB0"


# -- regenerate and remove --------------------------------------------------------------

async def test_regenerate_racing_a_claim_does_not_restart_the_claimed_node(rig):
    rec = rig.node(status=NodeStatus.UNCLAIMED, live=True)
    real_store = rig.gate.store

    async def store_then_claimed(node_id, kind, value):
        await real_store(node_id, kind, value)
        rig.store.put(rig.rec().replace(status=NodeStatus.JOINED, cadre="family"))  # claimed meanwhile
    rig.gate.store = store_then_claimed
    with pytest.raises(InvalidState, match="joined now"):
        await rig.service.regenerate("n1")
    assert rig.orch.stopped == [] and rig.rec().handle == rec.handle
    assert rig.keyring.items[(SERVICE, "n1/claim-secret")] == "secret-of-n1"  # the secret it runs with


async def test_remove_whose_folder_survives_keeps_the_tombstone_and_is_retried(tmp_path):
    rig = Rig(tmp_path)
    rig.node(live=True)
    real_remove = rig.orch.remove_node
    rig.orch.remove_node = _fail_once(real_remove)  # type: ignore[method-assign]  # the fake's removal fails once
    with pytest.raises(StorageError, match="work folder"):
        await rig.service.remove("n1")
    assert rig.rec() is None and "n1" in rig.store.pending_removals()
    assert await rig.service.reap_stuck() == ["n1"]
    assert rig.store.pending_removals() == {} or "n1" not in rig.store.pending_removals()
    await rig.close()


def _fail_once(real):
    calls = []

    async def remove_node(node_id):
        calls.append(node_id)
        if len(calls) == 1:
            raise StorageError(f"could not delete the work folder of node {node_id} (busy)")
        await real(node_id)
    return remove_node


async def test_the_local_driver_refuses_to_call_a_removal_done_while_the_folder_is_there(tmp_path, monkeypatch):
    from cadre_desktop.paths import Paths

    orch = Orchestrator(paths=Paths(tmp_path, tmp_path, tmp_path / "logs"),
                        node_command=["true"],
                        ports=None,  # type: ignore[arg-type]  # a removal allocates no port
                        bind_host="127.0.0.1", advertise_host=lambda: "x")
    (tmp_path / "nodes" / "n1").mkdir(parents=True)
    monkeypatch.setattr(shutil, "rmtree", lambda path, onerror=None: None)  # a folder that will not go
    with pytest.raises(StorageError, match="work folder of node n1"):
        await orch.remove_node("n1")


async def test_remove_of_an_id_this_home_never_had_touches_nothing(rig):
    rig.keyring.items[(SERVICE, "other/claim-secret")] = "theirs"
    assert await rig.service.remove("other") is False
    assert rig.keyring.items == {(SERVICE, "other/claim-secret"): "theirs"}
    assert rig.orch.removed == []


# -- the monotonic clock ----------------------------------------------------------------

async def test_a_wall_clock_stepped_back_does_not_lengthen_a_backoff(rig):
    rig.node(attempts=1, ago_s=0)
    await rig.sup.reconcile()  # inside the 10 s backoff: seen, anchored on the monotonic clock
    rig.clock.jump_wall(-600)
    await rig.clock.run_for(10)
    assert await rig.sup.reconcile() == ["n1"]


async def test_a_wait_carried_across_a_restart_from_a_future_timestamp_is_at_most_its_length(rig):
    rig.node(attempts=1, ago_s=-600)  # written "ten minutes from now" by a clock that was ahead
    assert await rig.sup.reconcile() == []
    await rig.clock.run_for(10)
    assert await rig.sup.reconcile() == ["n1"]


async def test_every_start_gets_the_nodes_name_and_a_fresh_host_token_kept_in_memory_only(rig, tmp_path):
    rig.node()
    await rig.sup.reconcile()
    rig.orch.exit(rig.rec().handle)
    await rig.clock.run_for(10)
    await rig.sup.reconcile()
    first, second = (env for node_id, env in rig.orch.envs if node_id == "n1")
    assert first["CADRE_NODE_NAME"] == "n1"
    assert len(first["CADRE_HOST_TOKEN"]) >= 40 and first["CADRE_HOST_TOKEN"] != second["CADRE_HOST_TOKEN"]
    assert rig.sup.starter.host_tokens[rig.rec().handle] == second["CADRE_HOST_TOKEN"]
    assert second["CADRE_HOST_TOKEN"] not in (tmp_path / "hosted-nodes.json").read_text()
