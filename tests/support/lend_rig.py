"""The supervision rig with lending on it: the real lifecycle (of both kinds), gate,
supervisor, probe and lending service over a fake clock, a fake driver and an
in-memory keyring."""

from __future__ import annotations

from datetime import timedelta

from cadre_desktop.host.core.clock import iso
from cadre_desktop.host.core.records.lifecycle import Lifecycle
from cadre_desktop.host.core.records.records import RespawnInfo, StartMark
from cadre_desktop.host.core.vault.secrets import SERVICE, SecretKind
from cadre_desktop.host.edges.lend_api import node_refusal
from cadre_desktop.host.lending.donations import Donation, DonationRequest, DonationStatus, DonationStore
from cadre_desktop.host.lending.grants import GrantStore
from cadre_desktop.host.lending.kind import DONATED
from cadre_desktop.host.lending.service import LendingService
from cadre_desktop.host.lending.views import LendingViews
from tests.support.rig import Rig

OWNER_KEY = "A" * 42 + "A"  # 32 zero bytes, base64url


class SeedAnswers:
    """A fake POST /seed to a lent node: the node's answer (taken as the real client takes it), and every call."""

    def __init__(self):
        self.answer: tuple[int, dict] = (200, {"state": "seeded"})
        self.calls: list[tuple[int, str, dict]] = []

    async def __call__(self, port, token, body):
        self.calls.append((port, token, body))
        status, answer = self.answer
        if status != 200:
            raise node_refusal(status, answer)


class LendRig(Rig):
    def __init__(self, tmp_path, **settings):
        super().__init__(tmp_path, **settings)
        self.grants = GrantStore(tmp_path / "grants.json")
        self.donations = DonationStore(tmp_path / "donations.json")
        self.dlc = Lifecycle(store=self.donations, events=self.events, clock=self.clock, kind=DONATED)
        self.lifecycle.neighbours.append(self.dlc)
        self.dlc.neighbours.append(self.lifecycle)
        self.sup.watch(self.dlc)
        self.probe.watch(self.dlc)
        self.seeds = SeedAnswers()
        self.lending = LendingService(
            grants=self.grants, lifecycle=self.dlc, driver=self.orch, gate=self.gate, supervisor=self.sup,
            nodes=self.service,
            clock=self.clock, settings=self.settings, advertise_host=lambda: "192.0.2.10",
            post_seed=self.seeds, ready_wait_s=0,
        )
        self.views = LendingViews(self.lending, log_path=lambda d: f"/logs/node-{d}.log")

    def token_of(self, row_id: str, kind: SecretKind) -> str | None:
        return self.keyring.items.get((SERVICE, f"{row_id}/{kind.value}"))

    async def grant(self, **kw):
        grant = await self.lending.create_grant(kw.pop("label", "friends"), **kw)
        return grant, self.token_of(grant.id, SecretKind.GRANT_TOKEN)

    async def request(self, grant, party="friends"):
        return await self.lending.request(grant, DonationRequest(party, "storage", ("10.0.0.1:4001",), (OWNER_KEY,)))

    def answer(self, donation_id: str, state: str = "awaiting_seed", peer: str = "cn1" + "p" * 32) -> None:
        """What the lent node's /status says from now on."""
        donation = self.donations.get(donation_id)
        assert donation is not None, f"no donation {donation_id}"
        handle = self.orch.get(donation.handle)
        self.answers.by_port[handle.api_port] = {"node_id": donation_id, "donation_id": donation_id,
                                                 "state": state, "peer_id": peer}

    def donation(self, donation_id="grn_aaaaaaaaaaaa", status=DonationStatus.SEEDED, live=False, attempts=None,
                 ago_s=0.0, grant_id="gr_aaaaaaaaaaaa", respawnable=True, cached=True, answered=True,
                 awaiting_since=None) -> Donation:
        """A lent node's row with a child (live or dead), its seed token in the keyring and, if `cached`, in memory."""
        h = self.orch.add_live(donation_id)
        if not live:
            h.alive, h.returncode = False, 1
        respawn = None
        if attempts is not None:
            respawn = RespawnInfo(attempts, iso(self.clock.now() - timedelta(seconds=ago_s)))
        row = Donation(
            id=donation_id, grant_id=grant_id, party_id="friends", profile="storage", status=status,
            bootstrap_nodes=("10.0.0.1:4001",) if respawnable else None,
            owner_keys=(OWNER_KEY,) if respawnable else None, handle=h.id, api_port=h.api_port,
            p2p_port=h.p2p_port, peer_id="cn1" + "p" * 32, respawn=respawn,
            start=StartMark(attempt=0, at=iso(self.clock.now()), answered=answered),
            created_at=iso(self.clock.now()), updated_at=iso(self.clock.now()),
            awaiting_since=awaiting_since or iso(self.clock.now()),
            seeded_at=iso(self.clock.now()) if status is DonationStatus.SEEDED else None,
        )
        self.donations.put(row)
        self.keyring.items[(SERVICE, f"{donation_id}/seed-token")] = f"seed-token-of-{donation_id}"
        if cached:
            self.gate._cache[(donation_id, SecretKind.SEED_TOKEN)] = f"seed-token-of-{donation_id}"
        return row

    def drow(self, donation_id="grn_aaaaaaaaaaaa") -> Donation | None:
        return self.donations.get(donation_id)

    def present_drow(self, donation_id="grn_aaaaaaaaaaaa") -> Donation:
        """The lent node's row, which the test expects to be there."""
        row = self.donations.get(donation_id)
        assert row is not None, f"no donation {donation_id}"
        return row
