"""The node service's actions and their unwinding, with a fake orchestrator."""

from __future__ import annotations

import pytest

from cadre_desktop.errors import Invalid, InvalidState, NoSuchThing, SecretsError, SpawnError, StorageError
from cadre_desktop.host.core.events import EventKind
from cadre_desktop.host.core.records.records import NodeMode, NodeStatus, RespawnInfo
from cadre_desktop.host.core.vault.keyring_gate import RETRY_FIRST_S
from cadre_desktop.host.core.vault.secrets import SERVICE, SecretKind
from tests.support.keyrings import LockedKeyring
from tests.support.polling import async_wait_until
from tests.support.rig import Rig


async def test_add_mints_a_secret_spawns_and_records_unclaimed(rig):
    rec = await rig.service.add("Kitchen")
    assert rec.status is NodeStatus.UNCLAIMED and rec.name == "Kitchen"
    secret = rig.keyring.items[(SERVICE, f"{rec.id}/claim-secret")]
    assert len(secret) >= 40
    assert rig.orch.spawned == [(rec.id, {"CADRE_CLAIM_SECRET": secret})]
    assert rig.orch.is_running(rec.handle) and rec.api_port
    assert secret not in rig.store.path.read_text()
    assert [e.kind for e in rig.seen] == [EventKind.ADDED]


async def test_join_records_joining_with_the_invitation_in_the_keyring(rig):
    rec = await rig.service.join("cadre-inv1.abc", None)
    assert rec.status is NodeStatus.JOINING and rec.mode is NodeMode.INVITATION
    assert rig.keyring.items[(SERVICE, f"{rec.id}/invitation")] == "cadre-inv1.abc"
    assert rig.orch.spawned[0][1] == {"CADRE_INVITATION": "cadre-inv1.abc"}


@pytest.mark.parametrize("bad", ["", "   ", "two words", "x" * 5000])
async def test_join_rejects_what_is_not_an_invitation(rig, bad):
    with pytest.raises(Invalid):
        await rig.service.join(bad)
    assert rig.store.list() == []


async def test_bad_name_is_refused(rig):
    with pytest.raises(Invalid):
        await rig.service.add("x" * 65)


async def test_failed_spawn_unwinds_everything(rig):
    rig.orch.spawn_error = SpawnError("could not start the node program")
    with pytest.raises(SpawnError):
        await rig.service.add("A")
    assert rig.store.list() == []
    assert rig.keyring.items == {}
    assert rig.orch.removed  # work folder cleaned
    assert rig.seen == []


async def test_locked_keyring_fails_add_with_nothing_left(tmp_path):
    r = Rig(tmp_path)
    from cadre_desktop.host.core.vault.secrets import SecretStore
    r.gate.secrets = SecretStore(LockedKeyring())
    with pytest.raises(SecretsError) as err:
        await r.service.add("A")
    assert "locked" in err.value.message.lower()
    assert r.store.list() == [] and r.orch.spawned == []
    r.gate.secrets.close()
    await r.close()


async def test_failed_final_write_stops_the_child_and_unwinds(rig, monkeypatch):
    real_put = rig.store.put

    def put(record):
        if record.status is NodeStatus.UNCLAIMED:
            raise StorageError("disk full")
        real_put(record)

    monkeypatch.setattr(rig.store, "put", put)
    with pytest.raises(StorageError):
        await rig.service.add("A")
    monkeypatch.undo()
    assert rig.store.list() == []
    assert rig.orch.list_nodes() == []
    assert rig.keyring.items == {}


async def test_remove_goes_record_first_then_child_then_files_and_twice_is_fine(rig):
    rec = await rig.service.add("A")
    order = []
    rig.orch.on_stop = lambda hid: order.append(("stop", rig.store.get(rec.id)))
    assert await rig.service.remove(rec.id) is True
    assert order == [("stop", None)]
    assert rig.orch.removed == [rec.id]
    assert rig.keyring.items == {}
    assert await rig.service.remove(rec.id) is False
    assert [e.kind for e in rig.seen].count(EventKind.REMOVED) == 1


async def test_retry_only_from_error_with_a_fresh_budget(rig):
    rec = await rig.service.add("A")
    with pytest.raises(InvalidState):
        await rig.service.retry(rec.id)
    rig.store.put(rig.store.get(rec.id).replace(status=NodeStatus.ERROR, error="gave up",
                                                 respawn=RespawnInfo(5, "2026-01-01T00:00:00Z")))
    rig.orch.exit(rec.handle)
    after = await rig.service.retry(rec.id)
    assert after.status is NodeStatus.UNCLAIMED and after.error is None
    assert after.attempts == 1
    assert rig.orch.is_running(after.handle)


async def test_retry_of_a_claimed_node_comes_back_joined(rig):
    rec = await rig.service.add("A")
    rig.store.put(rig.store.get(rec.id).replace(status=NodeStatus.ERROR, cadre="family"))
    assert (await rig.service.retry(rec.id)).status is NodeStatus.JOINED


async def test_restart_does_not_spend_budget_and_refuses_error(rig):
    rec = await rig.service.add("A")
    after = await rig.service.restart(rec.id)
    assert after.handle != rec.handle and after.attempts == 0
    assert rig.orch.stopped == [rec.handle]
    rig.store.put(after.replace(status=NodeStatus.ERROR))
    with pytest.raises(InvalidState, match="Retry"):
        await rig.service.restart(rec.id)


async def test_regenerate_changes_the_secret_and_restarts(rig):
    rec = await rig.service.add("A")
    old = rig.keyring.items[(SERVICE, f"{rec.id}/claim-secret")]
    after = await rig.service.regenerate(rec.id)
    new = rig.keyring.items[(SERVICE, f"{rec.id}/claim-secret")]
    assert new != old
    assert rig.orch.spawned[-1][1] == {"CADRE_CLAIM_SECRET": new}
    assert after.attempts == 0
    rig.store.put(after.replace(status=NodeStatus.JOINED))
    with pytest.raises(InvalidState):
        await rig.service.regenerate(rec.id)


async def test_actions_on_unknown_node_are_not_found(rig):
    for action in (rig.service.retry, rig.service.restart, rig.service.regenerate):
        with pytest.raises(NoSuchThing):
            await action("nope")


async def test_reap_clears_records_stuck_in_spawning(rig):
    rig.node("stuck", status=NodeStatus.SPAWNING, handle=None)
    rig.orch.add_live("stuck")  # the host died after the spawn, before the write-back
    assert await rig.service.reap_stuck() == ["stuck"]
    assert rig.store.get("stuck") is None
    assert rig.keyring.items == {}
    assert rig.orch.handles_for("stuck") == []


async def test_missing_secret_gives_up_at_once_without_spending_attempts(rig):
    """Once confirmed missing (two reads, CONFIRM_S apart: see keyring_gate), no start is tried."""
    rig.node("a", cached=False)
    del rig.keyring.items[(SERVICE, "a/claim-secret")]
    await rig.gate.prefetch([("a", SecretKind.CLAIM)])
    await rig.clock.run_for(RETRY_FIRST_S)
    await async_wait_until(lambda: rig.gate.is_missing("a", SecretKind.CLAIM), what="the second read")
    await rig.sup.reconcile()
    rec = rig.store.get("a")
    assert rec.status is NodeStatus.ERROR and rec.attempts == 0
    assert "missing from the keyring" in rec.error
    assert rig.orch.spawned == []


async def test_nodes_added_in_one_instant_keep_the_order_they_were_asked_for(rig):
    import asyncio

    names = ["Cellar", "attic", "Barn", "Den", "eaves"]
    made = await asyncio.gather(*(rig.service.add(n) for n in names))  # one clock reading for all
    assert [r.name for r in rig.store.list()] == names
    stamps = [r.created_at for r in made]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(names)
