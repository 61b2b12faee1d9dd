"""A node's caps: what it may use (CPU, memory, priority), from its record and the settings.

The host's defaults are settings (`node_cpu_percent`, `node_memory_mb`,
`node_low_priority`); a node's own `cpu_percent` and `memory_mb` on its record
win over them (null: the host's). The driver reads them at each start of the
node, so a change is taken at its next start; it enforces them by the OS and
says how (`NodeDriver.caps_enforcement`). A change a person asks for is checked
whole before anything is written: one clear error, nothing changed.
"""

from __future__ import annotations

from collections.abc import Mapping

from cadre_desktop.errors import Invalid
from cadre_desktop.host.core.driver import CapsEnforcement, NodeCaps
from cadre_desktop.host.core.records.records import NodeRecord
from cadre_desktop.jsontypes import JSONObject
from cadre_desktop.settings import Settings, check_cpu_percent, check_memory_mb

#: What `PATCH /api/nodes/{id}` and `node set` may change.
CAPS_FIELDS = frozenset({"cpu_percent", "memory_mb", "always_run"})


def node_caps(record: object, settings: Settings) -> NodeCaps:
    """The caps a start of this node gets: its own, else the host's. `record` may be None or a
    row of another kind (a lent node): it then gets the host's."""
    cpu = getattr(record, "cpu_percent", None)
    memory = getattr(record, "memory_mb", None)
    return NodeCaps(
        cpu_percent=cpu if cpu is not None else settings.node_cpu_percent,
        memory_mb=memory if memory is not None else settings.node_memory_mb,
        low_priority=settings.node_low_priority,
    )


def caps_view(caps: NodeCaps, enforcement: CapsEnforcement) -> JSONObject:
    """What every view of a node carries as `caps`."""
    return {"cpu_percent": caps.cpu_percent, "memory_mb": caps.memory_mb, "low_priority": caps.low_priority,
            "enforced": enforcement.enforced, "how": enforcement.how}


def check_caps_change(body: Mapping[str, object]) -> dict[str, object]:
    """The fields of a caps change, each checked; Invalid (naming the field) on the first bad
    one, before anything is changed. null for a cap means "the host's default"."""
    unknown = sorted(set(body) - CAPS_FIELDS)
    if unknown:
        raise Invalid(f"Unknown field(s): {', '.join(unknown)}; a node's caps are "
                      f"{', '.join(sorted(CAPS_FIELDS))}.")
    if not body:
        raise Invalid(f"Nothing to change: give one of {', '.join(sorted(CAPS_FIELDS))}.")
    checks = {"cpu_percent": check_cpu_percent, "memory_mb": check_memory_mb}
    for key, check in checks.items():
        if key in body and body[key] is not None:
            _value, problem = check(body[key])
            if problem:
                raise Invalid(f"{key} {problem} (or null for the host's default); got {str(body[key])[:40]}.")
    if "always_run" in body and not isinstance(body["always_run"], bool):
        raise Invalid("always_run must be true or false.")
    return dict(body)


def with_caps(record: NodeRecord, change: Mapping[str, object]) -> NodeRecord:
    """The record with a checked caps change applied."""
    return record.replace(**change)
