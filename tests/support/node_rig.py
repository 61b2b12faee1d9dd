"""A node in-process (no HTTP, no subprocess) on a fake clock, to call its decisions directly."""

from __future__ import annotations

from pathlib import Path

from cadre_desktop.node.config import load_config
from cadre_desktop.node.identity import load_or_create_identity
from cadre_desktop.node.node import Node
from cadre_desktop.node.state import StateStore
from tests.support.clock import FakeClock

SECRET = "correct-horse-battery-staple"


def make_node(tmp_path: Path, clock: FakeClock, **env: str) -> Node:
    node_dir = tmp_path / "node"
    node_dir.mkdir(exist_ok=True)
    config = load_config(
        {
            "CADRE_NODE_ID": "n1",
            "CADRE_NODE_DIR": str(node_dir),
            "CADRE_API_HOST": "127.0.0.1",
            "CADRE_API_PORT": "41001",
            "CADRE_P2P_PORT": "41002",
            "CADRE_ADVERTISE_HOST": "10.0.0.5",
            **({"CADRE_CLAIM_SECRET": SECRET} if "CADRE_INVITATION" not in env else {}),
            **env,
        }
    )
    identity = load_or_create_identity(node_dir)
    return Node(config, identity, StateStore(node_dir, "n1"), clock, "test")
