"""Keyring failures: adding a node fails clearly and leaves nothing; running nodes carry on.

A real headless host runs one node; then its keyring breaks: a backend that
raises, a locked keyring (a switchable test backend, and a real locked
gnome-keyring), no keyring at all (`keyring.backends.fail`, in a host started
after the one that added the node was killed). Adding or joining must answer a
503 whose message says what to do, the CLI must print it once and exit 1, and
nothing may be left: no record, no keyring entry, no work folder, no log, no
child, no port (the next add, once the keyring works, gets the first free
ports). The node that was running keeps running, even through a crash.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from cadre_desktop.host.local.ports import port_is_free
from tests.support.headless import HeadlessHost, host_settings
from tests.support.host_calls import answered, running
from tests.support.keyrings import FILE_ENV, MODE_ENV
from tests.support.node_scan import kill_node_processes, node_processes, read_json
from tests.support.polling import wait_until
from tests.support.secret_items import secret_items
from tests.support.session_bus import lock_default_collection

FAILURES = {
    "raise": ("keyring_error", "failed to store a secret"),
    "locked": ("keyring_locked", "The keyring is locked. Unlock it"),
    "gone": ("keyring_unavailable", "No usable keyring"),
}


def faulty_env(tmp_path: Path) -> dict[str, str]:
    return {"PYTHON_KEYRING_BACKEND": "tests.support.keyrings.FaultyKeyring",
            FILE_ENV: str(tmp_path / "keyring.json"), MODE_ENV: str(tmp_path / "keyring-mode")}


class Footprint:
    """Everything an add could leave behind, to compare before and after a failed one."""

    def __init__(self, host: HeadlessHost, entries) -> None:
        home = host.home
        self.records = (home / "hosted-nodes.json").read_bytes()
        self.state = (home / "state.json").read_bytes()
        self.folders = sorted(p.name for p in (home / "nodes").iterdir())
        self.logs = sorted(p.name for p in (home / "logs").iterdir())
        self.entries = entries()
        self.children = {n: [p.pid for p in ps] for n, ps in node_processes(home).items()}

    def __eq__(self, other) -> bool:
        return vars(self) == vars(other)

    def __repr__(self) -> str:
        return repr(vars(self))


def assert_add_fails_and_leaves_nothing(host: HeadlessHost, entries, code: str, words: str) -> None:
    before = Footprint(host, entries)
    for path, body in (("/api/nodes", {"name": "doomed"}),
                       ("/api/nodes/join", {"invitation": "cadre-inv1.eyJ4IjoxfQ"})):
        status, answer = answered(host, "POST", path, body)
        assert status == 503 and answer["error"]["code"] == code, answer
        assert words in answer["error"]["message"], answer
    cli = host.cli("node", "add", "--name", "doomed")
    assert cli.returncode == 1 and cli.stdout == "", cli
    lines = cli.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cadre-desktop: ") and words in lines[0], cli.stderr
    assert Footprint(host, entries) == before


def first_free_pair(settings: dict, taken: set[int]) -> list[int]:
    low, high = settings["port_range"]
    return [p for p in range(low, high + 1) if p not in taken and port_is_free("127.0.0.1", p)][:2]


@pytest.mark.parametrize("mode", list(FAILURES))
def test_add_fails_clearly_leaves_nothing_and_the_running_node_carries_on(tmp_path, hosts, rng, mode):
    env = faulty_env(tmp_path)
    settings = host_settings(rng)
    host = hosts(settings, keyring_env=env).start()
    kept = running(host, answered(host, "POST", "/api/nodes", {"name": "kept"})[1]["id"])

    def entries():
        return read_json(Path(env[FILE_ENV])) or {}

    Path(env[MODE_ENV]).write_text(mode)
    code, words = FAILURES[mode]
    assert_add_fails_and_leaves_nothing(host, entries, code, words)
    # The kept node runs on, and even comes back from a crash: its secret is in the host's memory.
    assert host.node(kept["id"])["pid"] == kept["pid"]
    os.kill(kept["pid"], signal.SIGKILL)
    again = running(host, kept["id"], not_pid=kept["pid"])
    assert again["api_port"] == kept["api_port"]
    # The keyring works again: the next node gets the first free ports, so none leaked.
    Path(env[MODE_ENV]).write_text("ok")
    expected = first_free_pair(settings, {kept["api_port"], kept["p2p_port"]})
    status, new = answered(host, "POST", "/api/nodes", {})
    assert status == 201, new
    assert [new["api_port"], new["p2p_port"]] == expected
    assert host.stop() == 0


def test_no_keyring_at_all_add_fails_clearly_and_the_running_node_stays(tmp_path, hosts, rng):
    env = faulty_env(tmp_path)
    settings = host_settings(rng)
    first = hosts(settings, keyring_env=env).start()
    kept = running(first, answered(first, "POST", "/api/nodes", {"name": "kept"})[1]["id"])
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    first.kill()
    # The next host finds no usable keyring at all. It still starts, and re-attaches.
    second = hosts(home=first.home, keyring_env={"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"})
    second.start()
    assert second.node(kept["id"])["pid"] == kept["pid"]
    assert_add_fails_and_leaves_nothing(second, lambda: read_json(Path(env[FILE_ENV])), "keyring_unavailable",
                                        "No usable keyring")
    assert second.node(kept["id"])["pid"] == kept["pid"]
    doctor = second.cli("doctor")
    assert doctor.returncode != 0
    assert any(line.startswith("FAIL") and "keyring" in line and "No usable keyring" in line
               for line in doctor.stdout.splitlines()), doctor.stdout
    assert second.stop() == 0


def test_a_really_locked_secret_service_fails_add_clearly_and_leaves_nothing(hosts, rng, private_secret_service):
    host = hosts(host_settings(rng), keyring_env=private_secret_service).start()
    kept = running(host, answered(host, "POST", "/api/nodes", {"name": "kept"})[1]["id"])
    entries_before = secret_items(private_secret_service)
    lock_default_collection(private_secret_service)
    assert_add_fails_and_leaves_nothing(host, lambda: entries_before, "keyring_locked",
                                        "The keyring is locked. Unlock it")
    os.kill(kept["pid"], signal.SIGKILL)
    running(host, kept["id"], not_pid=kept["pid"])
    assert host.stop() == 0
    wait_until(lambda: not node_processes(host.home), timeout=10, what="nodes stopped")
    kill_node_processes(host.home)
    assert json.loads((host.home / "hosted-nodes.json").read_text())["nodes"].keys() == {kept["id"]}
