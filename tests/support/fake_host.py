"""An in-memory Host for unit tests of the control API and the CLI (never for integration tests).

It keeps the Host interface the control API is written against: views, the
NoSuchThing/InvalidState errors, remove that never raises for a missing node, and
events through the engine's own EventBus.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from cadre_desktop.errors import InvalidState, NoSuchThing
from cadre_desktop.host.core.clock import iso
from cadre_desktop.host.core.events import EventBus, EventKind
from cadre_desktop.host.core.ops.caps import check_caps_change
from cadre_desktop.host.core.ops.views import NodeView
from cadre_desktop.host.core.records.records import NodeStatus
from cadre_desktop.host.core.supervision.holds import pause_end
from cadre_desktop.paths import Paths
from cadre_desktop.settings import Settings

STAMP = "2024-01-01T00:00:00+00:00"


def make_view(node_id: str, name: str, status: NodeStatus | str = NodeStatus.UNCLAIMED, **changes) -> NodeView:
    port = 47100
    view = NodeView(
        id=node_id, name=name, status=NodeStatus(status), mode="claim", running=True, ready=True, pid=4242,
        api_port=port, p2p_port=port + 1, peer_id=f"peer-{node_id}", cadre=None, attempts=0,
        next_retry_at=None, last_error=None,
        claim_url=f"http://127.0.0.1:{port}/claim?node={node_id}#secret-of-{node_id}" if status == "unclaimed" else None,
        advertise_host="127.0.0.1", created_at=STAMP, updated_at=STAMP, started_at=STAMP,
        log_path=f"/tmp/node-{node_id}.log",
    )
    return replace(view, **changes)


class FakeHost:
    def __init__(self, home: Path) -> None:
        self.paths = Paths(data_dir=home, config_dir=home, log_dir=home / "logs")
        self.settings = Settings()
        self.nodes: dict[str, NodeView] = {}
        self.bus = EventBus()
        self.calls: list[tuple] = []
        #: Per id no record names, the pids of its orphaned children (Remove reclaims them).
        self.orphans: dict[str, list[int]] = {}
        self.fail_next: Exception | None = None
        #: No lending in a fake host: its routes answer that lending is not ready.
        self.lending = None
        self.fleet = None  # no fleet either: its routes answer that it is not ready
        self.fleetrun = None  # nor the fleet's shared state (host/fleetrun/): a move answers so
        #: Pause all, as the Host says it (None: not paused).
        self.pause: dict | None = None
        self._counter = 0

    def subscribe(self, listener):
        return self.bus.subscribe(listener)

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def put(self, view: NodeView) -> NodeView:
        self.nodes[view.id] = view
        return view

    def list_nodes(self) -> list[NodeView]:
        return list(self.nodes.values())

    async def settled(self) -> None:
        """Nothing is written behind: every change here is in memory only."""

    def get_node(self, node_id: str) -> NodeView:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise NoSuchThing(f"No node with id {node_id!r}.") from None

    async def add_node(self, name: str | None = None) -> NodeView:
        self.calls.append(("add", name))
        self._maybe_fail()
        self._counter += 1
        node_id = f"n-{self._counter:x}"
        view = self.put(make_view(node_id, name or f"node {self._counter}"))
        self.bus.emit(EventKind.ADDED, node_id)
        return view

    async def join_node(self, invitation: str, name: str | None = None) -> NodeView:
        self.calls.append(("join", invitation, name))
        self._maybe_fail()
        self._counter += 1
        node_id = f"n-{self._counter:x}"
        view = self.put(make_view(node_id, name or "joined node", "joining", mode="invitation"))
        self.bus.emit(EventKind.ADDED, node_id)
        return view

    def node_history(self, node_id: str) -> dict:
        self.get_node(node_id)
        return {"node_id": node_id, "windows": []}  # a fake host keeps no history

    def log_tail(self, node_id: str, lines: int = 200) -> list[str]:
        self.get_node(node_id)
        return []  # nor logs

    async def invite_node(self, node_id: str, name: str | None = None) -> NodeView:
        self.get_node(node_id)
        raise InvalidState("this fake host invites no node")

    async def retry_node(self, node_id: str) -> NodeView:
        self.calls.append(("retry", node_id))
        view = self.get_node(node_id)
        if view.status != "error":
            raise InvalidState(f"Node {node_id} is {view.status}; only a node in error can be retried.")
        return self.put(replace(view, status=NodeStatus.UNCLAIMED, attempts=0, last_error=None))

    async def pause_node(self, node_id: str, *, for_ms: int | None = None, until: datetime | None = None) -> NodeView:
        self.calls.append(("pause", node_id, for_ms, until))
        view = self.get_node(node_id)
        wake = pause_end(datetime.now(UTC), for_ms, until)
        return self.put(replace(view, status=NodeStatus.SLEEPING if wake else NodeStatus.PAUSED, running=False, pid=None,
                                wake_at=iso(wake) if wake else None, held_by="person",
                                hold_reason="paused by a person"))

    async def resume_node(self, node_id: str) -> NodeView:
        self.calls.append(("resume", node_id))
        view = self.get_node(node_id)
        if view.status not in ("paused", "sleeping", "done"):
            raise InvalidState(f"Node {node_id} is {view.status}; only a held node can be resumed.")
        return self.put(replace(view, status=NodeStatus.JOINED, running=True, wake_at=None, held_by=None, hold_reason=None))

    def pause_state(self) -> dict:
        return self.pause or {"paused": False}

    async def pause_all(self, *, for_ms: int | None = None, until: datetime | None = None) -> dict:
        self.calls.append(("pause_all", for_ms, until))
        wake = pause_end(datetime.now(UTC), for_ms, until)
        self.pause = {"paused": True, "since": iso(datetime.now(UTC)), "until": iso(wake) if wake else None,
                      "left_ms": for_ms, "reason": "paused from the tray (Pause all)"}
        return self.pause

    async def resume_all(self) -> dict:
        self.calls.append(("resume_all",))
        self.pause = None
        return {"paused": False}

    def conditions_report(self) -> dict:
        return {"conditions": [], "verdict": {"run": True, "reason": None, "until": None}, "pending_s": None,
                "pause": self.pause_state(), "resumed": None}

    async def reclaim_orphan(self, node_id: str) -> list[int]:
        self.calls.append(("reclaim", node_id))
        return self.orphans.pop(node_id, [])

    async def restart_node(self, node_id: str) -> NodeView:
        self.calls.append(("restart", node_id))
        self._maybe_fail()
        view = self.get_node(node_id)
        return self.put(replace(view, pid=(view.pid or 0) + 1))

    async def regenerate_node(self, node_id: str) -> NodeView:
        self.calls.append(("regenerate", node_id))
        view = self.get_node(node_id)
        if view.status != "unclaimed":
            raise InvalidState(f"Node {node_id} is {view.status}; only an unclaimed node has a claim secret.")
        assert view.claim_url is not None  # an unclaimed view has one
        return self.put(replace(view, claim_url=view.claim_url + "-new"))

    async def set_node_caps(self, node_id: str, change: dict) -> NodeView:
        self.calls.append(("caps", node_id, change))
        checked = check_caps_change(change)
        view = self.get_node(node_id)
        caps = dict(view.caps or {"cpu_percent": None, "memory_mb": None, "low_priority": True,
                                  "enforced": True, "how": "fake"})
        caps.update({k: v for k, v in checked.items() if k != "always_run" and (v is None or isinstance(v, int))})
        return self.put(replace(view, caps=caps))

    async def remove_node(self, node_id: str) -> bool:
        self.calls.append(("remove", node_id))
        existed = self.nodes.pop(node_id, None) is not None
        if existed:
            self.bus.emit(EventKind.REMOVED, node_id)
        return existed


class ExplodingHost(FakeHost):
    """add_node fails with an exception nobody planned for, carrying a secret in its text."""

    async def add_node(self, name: str | None = None) -> NodeView:
        raise RuntimeError("boom with secret-of-everything")

    async def join_node(self, invitation: str, name: str | None = None) -> NodeView:
        raise RuntimeError(f"could not parse {invitation}")
