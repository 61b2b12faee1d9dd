"""Every lending rule on the fake clock: grants, caps, expiry, revoke, the reaper, and
lent nodes supervised on the hosted nodes' core (backoff, budget, give-up, retry,
skipped rows, abandoned starts)."""

from __future__ import annotations

import asyncio
import json
import os
import stat

import pytest

from cadre_desktop.errors import SpawnError, wire_code
from cadre_desktop.host.core.events import EventKind
from cadre_desktop.host.core.vault.secrets import SecretKind
from cadre_desktop.host.edges.lend_api import REFUSAL_STATUSES
from cadre_desktop.host.lending.donations import DonationStatus
from cadre_desktop.host.lending.service import LendRefused
from cadre_desktop.host.local.ports import port_is_free
from tests.support.keyrings import HangingKeyring
from tests.support.lend_rig import LendRig
from tests.support.polling import async_wait_until

D = DonationStatus


@pytest.fixture
async def rig(tmp_path):
    r = LendRig(tmp_path, respawn_backoff_base_ms=5000, respawn_max_attempts=5,
                donation_respawn_backoff_base_ms=1000, donation_respawn_max_attempts=3)
    yield r
    await r.close()


def refused(exc_info) -> tuple[int, str]:
    """The refusal as the lend API answers it: its status and its wire code."""
    return REFUSAL_STATUSES[exc_info.value.code], wire_code(exc_info.value.code)


# -- grants ----------------------------------------------------------------------------------------

async def test_a_grant_keeps_its_token_in_the_keyring_and_only_a_digest_in_its_file(rig, tmp_path):
    grant, token = await rig.grant(max_nodes=3)
    assert token and len(token) >= 43  # 256 bits
    text = (tmp_path / "grants.json").read_text()
    assert token not in text and json.loads(text)["grants"][grant.id]["token_sha256"]
    assert stat.S_IMODE(os.stat(tmp_path / "grants.json").st_mode) == 0o600
    assert (grant.max_nodes, grant.creating) == (3, False)
    assert EventKind.GRANT_ADDED in rig.kinds()
    assert (await rig.lending.link_of(grant.id)).endswith(f"/grants/{grant.id}#{token}")


async def test_a_grant_refused_by_the_keyring_leaves_no_row(rig, tmp_path):
    rig.keyring.set_password = lambda *a: (_ for _ in ()).throw(RuntimeError("backend broke"))
    with pytest.raises(Exception):
        await rig.grant()
    assert rig.grants.list() == []


async def test_the_right_token_opens_its_grant_and_anything_else_is_403(rig):
    grant, token = await rig.grant()
    other, other_token = await rig.grant()
    assert rig.lending.authorize(grant.id, token).id == grant.id
    for grant_id, given in ((grant.id, other_token), (grant.id, token + "x"), ("gr_nosuchgrant0", token),
                            (grant.id, ""), (grant.id, None)):
        with pytest.raises(LendRefused) as err:
            rig.lending.authorize(grant_id, given)
        assert refused(err) == (403, "wrong-token")


async def test_an_expired_grant_is_410_and_its_loans_end_at_the_next_pass(rig):
    grant, token = await rig.grant(expires_in_s=3600)
    donation = await rig.request(grant)
    await rig.clock.run_for(3601)
    with pytest.raises(LendRefused) as err:
        rig.lending.authorize(grant.id, token)
    assert refused(err) == (410, "grant-expired")
    await rig.lending.reap()
    assert rig.drow(donation.id) is None and rig.orch.removed == [donation.id]
    assert rig.token_of(grant.id, SecretKind.GRANT_TOKEN) is None
    assert rig.token_of(donation.id, SecretKind.SEED_TOKEN) is None
    assert rig.grants.get(grant.id).closed_at


async def test_a_closed_grant_never_reopens_when_the_wall_clock_steps_back(rig):
    grant, token = await rig.grant(expires_in_s=3600)
    await rig.clock.run_for(3601)
    await rig.lending.reap()
    assert rig.grants.get(grant.id).closed_at
    rig.clock.jump_wall(-7200)  # the wall clock set back, the host restarted meanwhile or not
    rig.lending._anchor = None  # as a new run of the host: only the row is left to say it
    with pytest.raises(LendRefused) as err:
        rig.lending.authorize(grant.id, token)
    assert refused(err) == (410, "grant-expired")
    assert rig.lending.active_grants() == []
    with pytest.raises(LendRefused):
        await rig.request(grant)


async def test_an_expiry_passed_stays_passed_when_the_clock_steps_back_before_the_sweep(rig):
    grant, token = await rig.grant(expires_in_s=3600)
    await rig.clock.run_for(3601)
    rig.clock.jump_wall(-7200)  # before any pass closed it
    with pytest.raises(LendRefused) as err:
        rig.lending.authorize(grant.id, token)
    assert refused(err) == (410, "grant-expired")
    await rig.lending.reap()
    assert rig.grants.get(grant.id).closed_at


async def test_revoking_ends_every_loan_and_deletes_the_token(rig):
    grant, token = await rig.grant(max_nodes=2)
    a, b = await rig.request(grant), await rig.request(grant)
    await rig.lending.revoke_grant(grant.id)
    assert rig.donations.list() == [] and rig.donations.pending_removals() == []
    assert sorted(rig.orch.removed) == sorted([a.id, b.id])
    assert rig.token_of(grant.id, SecretKind.GRANT_TOKEN) is None
    with pytest.raises(LendRefused) as err:
        rig.lending.authorize(grant.id, token)
    assert refused(err) == (410, "grant-revoked")


# -- caps ------------------------------------------------------------------------------------------

async def test_a_grant_lends_at_most_its_max_nodes(rig):
    grant, _ = await rig.grant(max_nodes=1)
    await rig.request(grant)
    with pytest.raises(LendRefused) as err:
        await rig.request(grant)
    assert refused(err) == (409, "grant-full")
    assert len(rig.donations.list()) == 1


async def test_the_host_lends_at_most_lend_max_nodes_over_all_grants(tmp_path):
    rig = LendRig(tmp_path, lend_max_nodes=2)
    try:
        first, _ = await rig.grant(max_nodes=2)
        second, _ = await rig.grant(max_nodes=2)
        await rig.request(first)
        await rig.request(second)
        with pytest.raises(LendRefused) as err:
            await rig.request(first)
        assert refused(err) == (409, "host-full")
    finally:
        await rig.close()


# -- a loan's start -----------------------------------------------------------------------------------

async def test_a_request_starts_a_donated_node_from_what_the_row_holds(rig):
    grant, _ = await rig.grant()
    donation = await rig.request(grant)
    assert donation.status is D.PROVISIONING and donation.handle and donation.start.attempt == 1
    (node_id, env), = rig.orch.envs
    seed_token = rig.token_of(donation.id, SecretKind.SEED_TOKEN)
    assert node_id == donation.id and seed_token and len(seed_token) >= 43
    assert env == {"CADRE_DONATION_ID": donation.id, "CADRE_PARTY_ID": "friends",
                   "CADRE_OWNER_KEYS": donation.owner_keys[0], "CADRE_BOOTSTRAP_NODES": "10.0.0.1:4001",
                   "CADRE_PROFILE": "storage", "CADRE_SEED_TOKEN": seed_token}
    assert seed_token not in (rig.donations.path.read_text())


async def test_the_node_answering_moves_it_to_awaiting_seed_with_its_peer_id(rig):
    grant, _ = await rig.grant()
    donation = await rig.request(grant)
    rig.answer(donation.id)
    await rig.probe.probe_all()
    row = rig.drow(donation.id)
    assert row.status is D.AWAITING_SEED and row.peer_id == "cn1" + "p" * 32 and row.awaiting_since
    assert row.start.answered


async def test_a_seed_the_node_takes_makes_it_seeded_and_a_refusal_says_why(rig):
    grant, _ = await rig.grant()
    donation = await rig.request(grant)
    with pytest.raises(LendRefused) as err:
        await rig.lending.seed(grant, donation.id, {"version": 1})
    assert refused(err) == (409, "not-ready")
    rig.answer(donation.id)
    await rig.probe.probe_all()
    rig.seeds.answer = (403, {"error": {"code": "untrusted-key", "message": "not signed by a trusted key"}})
    with pytest.raises(LendRefused) as err:
        await rig.lending.seed(grant, donation.id, {"version": 1})
    assert refused(err) == (400, "untrusted-key") and rig.drow(donation.id).status is D.AWAITING_SEED
    rig.seeds.answer = (200, {"state": "seeded"})
    seeded = await rig.lending.seed(grant, donation.id, {"version": 1})
    assert seeded.status is D.SEEDED and seeded.seeded_at
    assert rig.seeds.calls[-1][1] == rig.token_of(donation.id, SecretKind.SEED_TOKEN)


async def test_a_loan_ended_while_its_seed_token_is_written_leaves_nothing(tmp_path):
    keyring = HangingKeyring()
    keyring.set_password = _hang_then(keyring, keyring.set_password)  # type: ignore[method-assign]  # its writes hang too
    rig = LendRig(tmp_path, keyring=keyring)
    try:
        keyring.release.set()
        grant, _ = await rig.grant()
        keyring.release.clear()
        request = asyncio.ensure_future(rig.request(grant))
        await async_wait_until(lambda: rig.donations.list(), what="the row")
        donation_id = rig.donations.list()[0].id
        ending = asyncio.ensure_future(rig.lending.end(donation_id))
        await asyncio.sleep(0.05)
        keyring.release.set()
        with pytest.raises(LendRefused) as err:
            await request
        await ending
        assert refused(err) == (409, "donation-ended")
        assert rig.orch.spawned == [] and rig.donations.list() == [] and rig.donations.pending_removals() == []
        assert rig.token_of(donation_id, SecretKind.SEED_TOKEN) is None
    finally:
        await rig.close()


def _hang_then(keyring, call):
    def hanging(*args):
        keyring.release.wait(30)
        return call(*args)
    return hanging


# -- supervision on the core ----------------------------------------------------------------------------

async def test_a_crashed_lent_node_is_started_again_from_its_row_with_its_ports(rig):
    row = rig.donation(status=D.SEEDED)
    assert await rig.sup.reconcile() == [row.id]
    again = rig.drow()
    assert again.status is D.SEEDED and again.attempts == 1 and again.handle != row.handle
    assert (again.api_port, again.p2p_port) == (row.api_port, row.p2p_port)
    (_, env), = [e for e in rig.orch.envs if e[0] == row.id]
    assert "CADRE_HOST_TOKEN" not in env and "CADRE_NODE_NAME" not in env  # a party's node, not the owner's
    assert env["CADRE_SEED_TOKEN"] == f"seed-token-of-{row.id}" and env["CADRE_PARTY_ID"] == "friends"


async def test_lent_nodes_back_off_with_their_own_settings(rig):
    rig.donation(status=D.AWAITING_SEED, attempts=1, ago_s=1.5)  # donation base 1 s: wait 2 s
    assert await rig.sup.reconcile() == []
    await rig.clock.run_for(0.6)
    assert await rig.sup.reconcile() == [rig.drow().id]


async def test_a_lent_node_is_given_up_after_its_own_budget_and_the_owner_is_told(rig):
    rig.donation(status=D.SEEDED, attempts=3, ago_s=3600)  # donation budget: 3
    assert await rig.sup.reconcile() == []
    row = rig.drow()
    assert row.status is D.ERROR and "gave up after 3 attempts" in row.error
    gave_up = [e for e in rig.seen if e.kind is EventKind.DONATION_GAVE_UP]
    assert [e.node_id for e in gave_up] == [row.id] and "gave up" in gave_up[0].detail
    assert EventKind.GAVE_UP not in rig.kinds()  # a hosted node's event, not this one's


async def test_new_settings_give_lent_nodes_their_new_budget(rig):
    rig.donation(status=D.SEEDED, attempts=3, ago_s=3600)  # spent under the donation budget of 3
    rig.sup.use_settings(rig.settings.with_changes(donation_respawn_max_attempts=5))
    assert await rig.sup.reconcile() == [rig.drow().id]
    assert rig.drow().attempts == 4


async def test_retry_brings_a_lent_node_back_seeded_with_a_fresh_budget(rig):
    rig.donation(status=D.SEEDED, attempts=3, ago_s=3600)
    await rig.sup.reconcile()
    back = await rig.lending.retry(rig.drow().id)
    assert back.status is D.SEEDED and back.attempts == 1 and back.error is None
    assert rig.orch.is_running(back.handle)


async def test_a_lent_node_that_stays_up_gets_its_budget_back(rig):
    rig.donation(status=D.SEEDED, live=True, attempts=2, ago_s=601)  # healthy after 600 s (hosted default)
    await rig.sup.reconcile()
    assert rig.drow().attempts == 0


async def test_a_row_without_its_first_start_inputs_is_skipped_and_reported_and_the_pass_goes_on(rig, caplog):
    old = rig.donation("grn_oldoldoldold", respawnable=False)
    fine = rig.donation("grn_finefinefine")
    assert await rig.sup.reconcile() == [fine.id]
    assert rig.orch.spawns_of(old.id) == [] and rig.donations.get(old.id).attempts == 0
    assert rig.sup.decisions.last[old.id]["decision"] == "skipped"
    assert "not supervised" in caplog.text
    assert rig.views.donation(old.id).respawnable is False


async def test_a_start_waiting_for_the_keyring_is_abandoned_when_the_loan_ends(rig):
    row = rig.donation(status=D.SEEDED, cached=False)
    rig.keyring.get_password = lambda *a: (_ for _ in ()).throw(RuntimeError("keyring is locked"))
    await rig.sup.reconcile()
    assert rig.sup.waiting_for_keyring(row.id) and rig.drow().attempts == 0
    await rig.lending.end(row.id)
    rig.gate._cache[(row.id, SecretKind.SEED_TOKEN)] = "arrived-late"  # the keyring answers after the end
    assert await rig.sup.reconcile() == []
    assert rig.orch.spawns_of(row.id) == []


async def test_a_start_already_decided_is_abandoned_when_the_loan_ended_meanwhile(rig):
    row = rig.donation(status=D.SEEDED)
    await rig.lending.end(row.id)
    assert await rig.sup.starter.start(rig.sup.kinds.of(row.id), row.id, counted=True,
                                       expect_handle=row.handle) is False
    assert rig.orch.spawns_of(row.id) == []


async def test_a_failed_start_of_a_lent_node_counts_and_gives_up_at_the_budget(rig):
    rig.donation(status=D.SEEDED, attempts=2, ago_s=3600)
    rig.orch.spawn_error = SpawnError("the node program is gone")
    await rig.sup.reconcile()
    row = rig.drow()
    assert row.status is D.ERROR and row.attempts == 3 and "the node program is gone" in row.error


# -- the reaper --------------------------------------------------------------------------------------

async def test_a_lent_node_that_never_answers_is_cleared_after_the_provisioning_ttl(rig):
    grant, _ = await rig.grant()
    donation = await rig.request(grant)
    await rig.clock.run_for(119)
    assert await rig.lending.reap() == []
    await rig.clock.run_for(2)
    assert await rig.lending.reap() == [donation.id]
    assert rig.drow(donation.id) is None and rig.orch.removed == [donation.id]


async def test_a_lent_node_nobody_seeds_is_cleared_after_a_day_and_a_seeded_one_stays(rig):
    grant, _ = await rig.grant(max_nodes=2)
    waiting = await rig.request(grant)
    seeded = await rig.request(grant)
    for d in (waiting, seeded):
        rig.answer(d.id, "awaiting_seed" if d is waiting else "seeded")
    await rig.probe.probe_all()
    await rig.clock.run_for(24 * 3600 + 1)
    assert await rig.lending.reap() == [waiting.id]
    assert rig.drow(seeded.id).status is D.SEEDED


async def test_a_row_left_provisioning_without_a_child_is_reclaimed_with_its_folder_and_token(rig):
    grant, _ = await rig.grant()
    row = rig.donation("grn_halfhalfhalf", status=D.PROVISIONING, grant_id=grant.id)
    rig.donations.put(row.replace(handle=None))
    assert await rig.lending.reap() == [row.id]
    assert rig.orch.removed == [row.id] and rig.token_of(row.id, SecretKind.SEED_TOKEN) is None
    assert rig.donations.pending_removals() == []


async def test_a_grant_left_half_created_is_cleared(rig):
    from cadre_desktop.host.lending.grants import Grant

    rig.grants.put(Grant(id="gr_halfcreated0", label="x", max_nodes=1, token_sha256="0" * 64,
                         created_at="2026-01-01T00:00:00Z", creating=True))
    rig.keyring.items[("cadre-desktop", "gr_halfcreated0/grant-token")] = "orphan"
    assert await rig.lending.reap() == ["gr_halfcreated0"]
    assert rig.grants.list() == [] and rig.token_of("gr_halfcreated0", SecretKind.GRANT_TOKEN) is None


async def test_an_end_of_loan_left_unfinished_is_finished(rig):
    row = rig.donation()
    rig.donations.mark_removed(row.id, "2026-01-01T00:00:00Z")
    assert await rig.lending.reap() == [row.id]
    assert rig.donations.pending_removals() == [] and rig.orch.removed == [row.id]


# -- drop and restore of handles ----------------------------------------------------------------------

async def test_a_failing_launch_of_a_lent_node_puts_its_old_handle_back_and_leaks_no_port(tmp_path):
    from cadre_desktop.host.local.handles import Handle
    from cadre_desktop.host.local.orchestrator import Orchestrator
    from cadre_desktop.host.local.ports import PortAllocator
    from cadre_desktop.host.local.system import procs
    from cadre_desktop.paths import Paths

    rig = LendRig(tmp_path)
    ports = PortAllocator(41000, 41099, bind_host="127.0.0.1")
    orch = Orchestrator(paths=Paths(tmp_path, tmp_path, tmp_path / "logs"),
                        node_command=[str(tmp_path / "no-such-program")], ports=ports, bind_host="127.0.0.1",
                        advertise_host=lambda: "127.0.0.1")
    try:
        row = rig.donation(status=D.SEEDED)
        rig.donations.put(row.replace(api_port=41010, p2p_port=41011))
        assert row.handle is not None  # the row runs on a (fake) child
        old = Handle(id=row.handle, node_id=row.id, pid=999999, identity=procs.Identity("0"), api_port=41010,
                     p2p_port=41011, started_at="", alive=False, returncode=1)
        orch._handles[old.id] = old
        ports.reserve(old.ports)
        rig.sup.driver = rig.sup.starter.driver = rig.lending.driver = orch
        await rig.sup.reconcile()
        assert orch.get(old.id) is old and orch.handles_for(row.id) == [old]
        assert not ports.try_reserve([41010]) and not ports.try_reserve([41011]), "the old handle's ports are free"
        free = [p for p in range(41000, 41100) if p not in (41010, 41011) and port_is_free("127.0.0.1", p)]
        assert ports.allocate(2) == free[:2], "the failed launch left a port held"
        assert rig.present_drow().attempts == 1 and "could not start the node program" in (rig.present_drow().error or "")
    finally:
        orch.close()
        await rig.close()


async def test_the_reaper_waits_while_the_keyring_refuses_and_catches_up_after(rig):
    grant, _ = await rig.grant()
    donation = await rig.request(grant)
    await rig.clock.run_for(121)  # past the provisioning TTL
    from cadre_desktop.host.core.vault.keyring_gate import KeyringCondition

    rig.gate.condition = KeyringCondition("keyring_locked", "The keyring is locked.")
    assert await rig.lending.reap() == [] and rig.drow(donation.id) is not None
    rig.gate.condition = None
    assert await rig.lending.reap() == [donation.id]


async def test_a_revoke_on_a_locked_keyring_finishes_its_deletes_once_it_is_unlocked(rig):
    """Issue 27: nothing else asks the keyring afterwards; the gate probes by itself."""
    from cadre_desktop.errors import SecretsError
    from cadre_desktop.host.core.vault.keyring_gate import RETRY_MAX_S

    grant, _ = await rig.grant()
    donation = await rig.request(grant)
    rig.keyring.locked = True
    with pytest.raises(SecretsError):
        await rig.lending.revoke_grant(grant.id)
    assert rig.token_of(donation.id, SecretKind.SEED_TOKEN) is not None
    rig.keyring.locked = False
    for _ in range(3):
        await rig.clock.run_for(RETRY_MAX_S)
    await async_wait_until(lambda: rig.gate.condition is None and not rig.gate.pending_deletes,
                           what="the gate finishing the deletes")
    assert rig.token_of(donation.id, SecretKind.SEED_TOKEN) is None
    await rig.lending.reap()  # the next sweep: the rows catch up
    assert rig.token_of(grant.id, SecretKind.GRANT_TOKEN) is None
    assert rig.grants.get(grant.id).closed_at and rig.donations.pending_removals() == []


def test_a_home_that_only_lends_keeps_its_home_id_before_naming_a_keyring_entry(tmp_path):
    """Bug: a home with no hosted node never wrote hosted-nodes.json, so each start made up a
    new home id and could not find the grant and seed tokens the last run stored."""
    from cadre_desktop.host.core.records.store import RecordStore

    store = RecordStore(tmp_path / "hosted-nodes.json")
    first = store.home_id
    store.persist_home()
    assert RecordStore(tmp_path / "hosted-nodes.json").home_id == first
    store.persist_home()  # an existing file is left as it is
    assert RecordStore(tmp_path / "hosted-nodes.json").home_id == first


# -- holds: a lent node follows the hosted nodes' rules ---------------------------------------------

async def test_a_lent_node_paused_by_its_owner_stops_spends_nothing_and_its_borrower_is_told(rig):
    row = rig.donation(status=D.SEEDED, live=True, attempts=1, ago_s=3600)
    held = await rig.lending.pause(row.id)
    assert held.status is D.PAUSED and not rig.orch.is_running(row.handle)
    for _ in range(3):
        await rig.sup.reconcile()
        await rig.clock.run_for(3600)
    assert rig.orch.spawns_of(row.id) == [] and rig.drow().attempts == 1
    borrower = rig.views.for_borrower(rig.drow())
    assert borrower["status"] == "paused" and borrower["held_by"] == "host"
    assert rig.views.donation(row.id).hold_reason == "paused by a person"
    resumed = await rig.lending.resume(row.id)
    assert resumed.status is D.SEEDED and rig.orch.is_running(resumed.handle) and resumed.attempts == 1
    assert rig.views.for_borrower(rig.drow())["held_by"] is None


async def test_pause_all_holds_a_lent_node_and_its_end_starts_it_again(rig, tmp_path):
    from cadre_desktop.host.core.supervision.host_holds import HostHolds

    holds = HostHolds(tmp_path / "host-pause.json", rig.clock)
    rig.sup.observer.host_hold = holds.wanted
    row = rig.donation(status=D.SEEDED, live=True, attempts=1, ago_s=3600)
    holds.pause_all()
    await rig.sup.reconcile()
    assert rig.drow().status is D.PAUSED and not rig.orch.is_running(row.handle)
    assert rig.views.for_borrower(rig.drow())["held_by"] == "host"
    holds.resume_all()
    await rig.sup.reconcile()
    assert rig.drow().status is D.SEEDED and rig.orch.is_running(rig.drow().handle) and rig.drow().attempts == 1


async def test_a_lent_node_asleep_for_a_while_wakes_by_itself(rig):
    row = rig.donation(status=D.AWAITING_SEED, live=True)
    await rig.lending.pause(row.id, for_ms=60_000)
    assert rig.drow().status is D.SLEEPING
    await rig.clock.run_for(59)
    await rig.sup.reconcile()
    assert rig.orch.spawns_of(row.id) == []
    await rig.clock.run_for(1)
    await rig.sup.reconcile()
    assert rig.orch.spawns_of(row.id) and rig.drow().status is D.AWAITING_SEED
