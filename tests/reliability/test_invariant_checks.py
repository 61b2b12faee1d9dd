"""The invariant the reliability tests settle on can fail: a planted stray breaks it.

`check_invariant` (tests/support/node_scan.py) is what the chaos and crash tests
wait for. If it could not see a second child, an orphan or a child of a node in
error, those tests would pass whatever the host did; here each is planted by
hand (a sleeping process with a node's environment) and must be reported.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.node_scan import check_invariant, wait_settled
from tests.support.polling import wait_until


def plant(home, node_id: str) -> subprocess.Popen:
    env = {"CADRE_NODE_ID": node_id, "CADRE_NODE_DIR": str(home / "nodes" / node_id), "PATH": "/usr/bin:/bin"}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env)


def write_home(home, records: dict, handles: dict) -> None:
    (home / "nodes").mkdir(parents=True, exist_ok=True)
    (home / "hosted-nodes.json").write_text(json.dumps({"version": 2, "nodes": records}))
    (home / "state.json").write_text(json.dumps({"version": 2, "handles": handles}))


@pytest.fixture
def planted():
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def handle_row(pid: int, port: int) -> dict:
    return {"node_id": "n1", "pid": pid, "api_port": port, "p2p_port": port + 1, "start_time": "x"}


@pytest.mark.parametrize("case", ["second child", "orphan", "child of a node in error"])
def test_a_planted_stray_breaks_the_invariant(tmp_path, planted, case):
    home = tmp_path / "home"
    child = plant(home, "n1")
    planted.append(child)
    status = "error" if case == "child of a node in error" else "joined"
    records = {"n1": {"name": "n1", "status": status, "mode": "claim", "handle": "n1.a"}}
    handles = {"n1.a": handle_row(child.pid, 41000)} if status == "joined" else {}
    write_home(home, records, handles)
    wait_until(lambda: "n1" in check_invariant(home).procs, timeout=10, what="the child is seen")
    if status == "joined":
        assert check_invariant(home).problems == []  # one child, the tracked one: settled
    if case == "second child":
        planted.append(plant(home, "n1"))
    elif case == "orphan":
        planted.append(plant(home, "ghost"))
    problems = wait_until(lambda: check_invariant(home).problems, timeout=10, what="the stray reported")
    assert any(word in " ".join(problems) for word in ("2 live children", "orphan", "in error"))
    with pytest.raises(AssertionError, match="not settled"):
        wait_settled(home, set(), timeout=0.5)
