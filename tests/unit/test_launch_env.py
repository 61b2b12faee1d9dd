"""The one builder of a node child's environment (node contract §1), used by the orchestrator and doctor."""

from pathlib import Path
from typing import Any

from cadre_desktop.host.local import launch


def build(**changes):
    args: dict[str, Any] = dict(node_id="n1", work=Path("/home/x/nodes/n1"), bind_host="0.0.0.0", ports=(47100, 47101),
                advertise_host="192.0.2.7", attempt=3, secret_env={"CADRE_CLAIM_SECRET": "s3cret"})
    args.update(changes)
    return launch.node_env({"PATH": "/bin", "CADRE_INVITATION": "stale", "CADRE_NODE_ID": "other"}, **args)


def test_the_child_gets_the_contract_variables_and_nothing_inherited_of_ours():
    assert build() == {
        "PATH": "/bin", "PYTHONUNBUFFERED": "1", "CADRE_NODE_ID": "n1", "CADRE_NODE_DIR": "/home/x/nodes/n1",
        "CADRE_API_HOST": "0.0.0.0", "CADRE_API_PORT": "47100", "CADRE_P2P_PORT": "47101",
        "CADRE_ADVERTISE_HOST": "192.0.2.7", "CADRE_START_ATTEMPT": "3", "CADRE_CLAIM_SECRET": "s3cret",
    }
