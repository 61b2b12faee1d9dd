"""What the control API asks of the host it serves: the Host, or a fake in unit tests.

A Protocol, so the control API and its lending routes are written against exactly what
they call, and `tests/support/fake_host.py` is checked to keep to it
(tests/unit/test_test_layout.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from cadre_desktop.host.core.events import HostEvent
from cadre_desktop.host.core.views import NodeView
from cadre_desktop.paths import Paths

if TYPE_CHECKING:
    from cadre_desktop.host.lend_host import Lending


class ServedHost(Protocol):
    """What the control API asks of the host it serves: the Host, or a fake in unit tests."""

    @property
    def paths(self) -> Paths: ...

    @property
    def lending(self) -> Lending | None: ...

    def subscribe(self, listener: Callable[[HostEvent], None]) -> Callable[[], None]: ...

    def list_nodes(self) -> list[NodeView]: ...

    def get_node(self, node_id: str) -> NodeView: ...

    async def add_node(self, name: str | None = None) -> NodeView: ...

    async def join_node(self, invitation: str, name: str | None = None) -> NodeView: ...

    async def invite_node(self, node_id: str, name: str | None = None) -> NodeView: ...

    async def retry_node(self, node_id: str) -> NodeView: ...

    async def restart_node(self, node_id: str) -> NodeView: ...

    async def regenerate_node(self, node_id: str) -> NodeView: ...

    async def remove_node(self, node_id: str) -> bool: ...

    async def pause_node(self, node_id: str, *, for_ms: int | None = None, until: datetime | None = None) -> NodeView: ...

    async def resume_node(self, node_id: str) -> NodeView: ...

    async def reclaim_orphan(self, node_id: str) -> list[int]: ...

    def node_history(self, node_id: str) -> dict[str, Any]: ...

    async def set_node_caps(self, node_id: str, change: dict[str, Any]) -> NodeView: ...
