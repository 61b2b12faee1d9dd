"""The invariant the reliability tests settle on can fail: a planted stray or a broken file breaks it.

`check_invariant` (tests/support/node_scan.py) is what the chaos and crash tests
wait for. If it could not see a second child, an orphan or a child of a node in
error, those tests would pass whatever the host did; here each is planted by
hand (a sleeping process with a node's environment) and must be reported. So must
every other rule it checks (a record's one child is its handle's pid, nothing left
half-done, no stale handle, no shared or foreign port, lent nodes alike), and the
crash test's `untracked`.
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


def test_a_second_child_or_an_orphan_is_untracked(tmp_path, planted):
    """`Snapshot.untracked` (the crash test's "no child runs untracked") sees a child state.json does not name."""
    home = tmp_path / "home"
    child = plant(home, "n1")
    planted.append(child)
    write_home(home, {"n1": {"name": "n1", "status": "joined", "mode": "claim", "handle": "n1.a"}},
               {"n1.a": handle_row(child.pid, 41000)})
    wait_until(lambda: "n1" in check_invariant(home).procs, timeout=10, what="the child is seen")
    assert check_invariant(home).untracked == []
    stray = plant(home, "ghost")
    planted.append(stray)
    untracked = wait_until(lambda: check_invariant(home).untracked, timeout=10, what="the stray seen untracked")
    assert [p.pid for p in untracked] == [stray.pid]


LISTENER = ("import socket, time\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
            "print(s.getsockname()[1], flush=True)\n"
            "time.sleep(600)\n")

#: Each fault of the files (or of what a child listens on), and the words that report it.
FILE_FAULTS = {
    "supervised without a child": "0 live children",
    "handle missing from state.json": "is not in state.json",
    "another pid in state.json": "state.json says pid",
    "left half-done": "is left 'spawning'",
    "a handle no record names": "that no supervised record names",
    "two handles on one port": "port 41001 is in handles",
    "a child on a port not its own": "not the ports of a live handle",
    "a lent node with two children": "grn_a (seeded) has 2 live children",
}


@pytest.mark.parametrize("case", FILE_FAULTS)
def test_each_broken_rule_of_the_invariant_is_reported(tmp_path, planted, case):
    home = tmp_path / "home"
    (home / "nodes").mkdir(parents=True)
    node_id = "grn_a" if case == "a lent node with two children" else "n1"
    child = subprocess.Popen([sys.executable, "-c", LISTENER], stdout=subprocess.PIPE, text=True,
                             env={"CADRE_NODE_ID": node_id, "CADRE_NODE_DIR": str(home / "nodes" / node_id),
                                  "PATH": "/usr/bin:/bin"})
    planted.append(child)
    assert child.stdout is not None
    port = int(child.stdout.readline())
    row = {**handle_row(child.pid, 41000), "node_id": node_id, "api_port": port}
    record: dict[str, str | None] = {"name": node_id, "status": "joined", "mode": "claim", "handle": f"{node_id}.a"}
    records, handles, lent = {"n1": record}, {"n1.a": row}, {}
    if case == "supervised without a child":
        records["n2"] = {**record, "handle": "n2.a"}
        handles["n2.a"] = {**handle_row(child.pid + 1, 42000), "node_id": "n2"}
    elif case == "handle missing from state.json":
        handles = {}
    elif case == "another pid in state.json":
        row["pid"] = child.pid + 1
    elif case == "left half-done":
        records["n2"] = {**record, "status": "spawning", "handle": None}
    elif case == "a handle no record names":
        handles["n1.old"] = handle_row(child.pid + 1, 43000)
    elif case == "two handles on one port":
        records["n2"] = {**record, "status": "error", "handle": None}
        handles["n2.a"] = {**handle_row(child.pid + 1, 42000), "node_id": "n2", "api_port": row["p2p_port"]}
    elif case == "a child on a port not its own":
        row["api_port"] = 44000
    elif case == "a lent node with two children":
        records, handles = {}, {"grn_a.a": row}
        lent = {"grn_a": {"status": "seeded", "handle": "grn_a.a"}}
        planted.append(plant(home, "grn_a"))
    write_home(home, records, handles)
    (home / "donations.json").write_text(json.dumps({"version": 1, "donations": lent}))
    wait_until(lambda: FILE_FAULTS[case] in " ".join(check_invariant(home).problems), timeout=10,
               what=f"{case} reported as {FILE_FAULTS[case]!r}")


def test_the_invariant_holds_for_a_well_formed_home(tmp_path, planted):
    """The same home as above with nothing broken: no problem (so the reports above are the faults')."""
    home = tmp_path / "home"
    (home / "nodes").mkdir(parents=True)
    child = subprocess.Popen([sys.executable, "-c", LISTENER], stdout=subprocess.PIPE, text=True,
                             env={"CADRE_NODE_ID": "n1", "CADRE_NODE_DIR": str(home / "nodes" / "n1"),
                                  "PATH": "/usr/bin:/bin"})
    planted.append(child)
    assert child.stdout is not None
    port = int(child.stdout.readline())
    write_home(home, {"n1": {"name": "n1", "status": "joined", "mode": "claim", "handle": "n1.a"}},
               {"n1.a": {**handle_row(child.pid, 41000), "api_port": port}})
    wait_until(lambda: "n1" in check_invariant(home).procs, timeout=10, what="the child is seen")
    assert check_invariant(home).problems == []
