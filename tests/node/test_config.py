"""Start-up failures: one clear line on stderr and a distinct exit code each.

Exit codes: 2 configuration, 3 a port cannot be bound, 4 the work folder is
unusable, 5 an identity or state file is corrupt (and left untouched).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.support.node_process import NodeLauncher, free_port

REQUIRED = [
    "CADRE_NODE_ID",
    "CADRE_NODE_DIR",
    "CADRE_API_HOST",
    "CADRE_API_PORT",
    "CADRE_P2P_PORT",
    "CADRE_ADVERTISE_HOST",
]


def assert_one_line_naming(stderr: str, *words: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("cadre-node: error: ")
    for word in words:
        assert word in lines[0], stderr


@pytest.mark.parametrize("name", REQUIRED)
def test_missing_variable_exits_2_naming_it(nodes: NodeLauncher, name: str) -> None:
    env = nodes.env_for("cfg")
    del env[name]
    result = nodes.run_to_exit(env)
    assert result.returncode == 2
    assert_one_line_naming(result.stderr, name, "not set")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CADRE_API_PORT", "http"),
        ("CADRE_API_PORT", "70000"),
        ("CADRE_P2P_PORT", "0"),
        ("CADRE_NODE_ID", "bad id!"),
        ("CADRE_ADVERTISE_HOST", "two words"),
        ("CADRE_JOIN_TIMEOUT_MS", "-1"),
        ("CADRE_LOG_LEVEL", "LOUD"),
    ],
)
def test_bad_variable_exits_2_naming_it(nodes: NodeLauncher, name: str, value: str) -> None:
    env = nodes.env_for("cfg", extra={name: value})
    result = nodes.run_to_exit(env)
    assert result.returncode == 2
    assert_one_line_naming(result.stderr, name)


def test_same_api_and_p2p_port_exits_2(nodes: NodeLauncher) -> None:
    port = free_port()
    result = nodes.run_to_exit(nodes.env_for("cfg", api_port=port, p2p_port=port))
    assert result.returncode == 2
    assert_one_line_naming(result.stderr, "CADRE_API_PORT", "CADRE_P2P_PORT")


def test_both_claim_secret_and_invitation_exit_2(nodes: NodeLauncher) -> None:
    env = nodes.env_for("cfg", extra={"CADRE_INVITATION": "cadre-inv1.e30"})
    result = nodes.run_to_exit(env)
    assert result.returncode == 2
    assert_one_line_naming(result.stderr, "CADRE_CLAIM_SECRET", "CADRE_INVITATION")
    assert env["CADRE_CLAIM_SECRET"] not in result.stderr


def test_neither_claim_secret_nor_invitation_exits_2(nodes: NodeLauncher) -> None:
    env = nodes.env_for("cfg")
    del env["CADRE_CLAIM_SECRET"]
    result = nodes.run_to_exit(env)
    assert result.returncode == 2
    assert_one_line_naming(result.stderr, "CADRE_CLAIM_SECRET", "CADRE_INVITATION")


def test_short_claim_secret_exits_2_without_echoing_it(nodes: NodeLauncher) -> None:
    env = nodes.env_for("cfg", claim_secret="tooshort")
    result = nodes.run_to_exit(env)
    assert result.returncode == 2
    assert_one_line_naming(result.stderr, "CADRE_CLAIM_SECRET")
    assert "tooshort" not in result.stderr


def test_arguments_are_refused_with_exit_2(nodes: NodeLauncher) -> None:
    import subprocess
    import sys

    env = nodes.env_for("cfg")
    result = subprocess.run(
        [sys.executable, "-m", "cadre_desktop.node", "--claim-secret", "x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert result.returncode == 2
    assert "environment" in result.stderr


@pytest.mark.parametrize("which", ["api_port", "p2p_port"])
def test_port_in_use_exits_3(nodes: NodeLauncher, which: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = nodes.run_to_exit(nodes.env_for("cfg", **{which: port}))
    assert result.returncode == 3
    assert f"127.0.0.1:{port}" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("cadre-node: error: cannot listen")


def test_node_dir_that_is_a_file_exits_4(nodes: NodeLauncher, tmp_path: Path) -> None:
    not_a_dir = tmp_path / "plain-file"
    not_a_dir.write_text("x")
    result = nodes.run_to_exit(nodes.env_for("cfg", node_dir=not_a_dir))
    assert result.returncode == 4
    assert_one_line_naming(result.stderr, "CADRE_NODE_DIR", str(not_a_dir))


@pytest.mark.slow
async def test_second_process_on_the_same_node_dir_exits_4(nodes: NodeLauncher) -> None:
    running = await nodes.start("cfg")
    result = nodes.run_to_exit(nodes.env_for("cfg", node_dir=running.node_dir))
    assert result.returncode == 4
    assert running.proc is not None
    assert_one_line_naming(result.stderr, "in use", f"(pid {running.proc.pid})")


@pytest.mark.parametrize("content", [b"{ torn", b'{"version": 99}', b"[]", b'{"version": 1}'])
async def test_corrupt_state_file_exits_5_and_is_left_untouched(
    nodes: NodeLauncher, tmp_path: Path, content: bytes
) -> None:
    node_dir = tmp_path / "corrupt"
    node_dir.mkdir()
    state = node_dir / "node-state.json"
    state.write_bytes(content)
    result = nodes.run_to_exit(nodes.env_for("cfg", node_dir=node_dir))
    assert result.returncode == 5
    assert_one_line_naming(result.stderr, str(state), "left as is")
    assert state.read_bytes() == content


def test_corrupt_identity_file_exits_5_and_is_left_untouched(
    nodes: NodeLauncher, tmp_path: Path
) -> None:
    node_dir = tmp_path / "corrupt"
    node_dir.mkdir()
    identity = node_dir / "identity.json"
    content = json.dumps({"version": 1, "kind": "ed25519", "private_key": "AAAA"}).encode()
    identity.write_bytes(content)
    result = nodes.run_to_exit(nodes.env_for("cfg", node_dir=node_dir))
    assert result.returncode == 5
    assert_one_line_naming(result.stderr, str(identity))
    assert identity.read_bytes() == content
