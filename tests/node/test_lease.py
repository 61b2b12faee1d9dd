"""Never twice, the node's side (node/lease.py, wire/lease.py): a node started with a lease
deadline stops serving by itself once it passes, unless its host moved it on."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from cadre_desktop.errors import Invalid
from cadre_desktop.node.config import load_config
from cadre_desktop.node.errors import ConfigError, ExitCode
from cadre_desktop.node.lease import LeaseExpired, LeaseWatch
from cadre_desktop.wire import lease as wire_lease
from cadre_desktop.wire.httpmsg import Answer, Request
from cadre_desktop.wire.lease import LeaseTerms, boot_ns, env_of, parse, render, terms_from_env
from tests.support.node_process import NodeLauncher, poll

S = 1_000_000_000


class Boot:
    def __init__(self, ns: int = 100 * S) -> None:
        self.ns = ns

    def __call__(self) -> int:
        return self.ns


def watch(tmp_path: Path, deadline_s: float, boot: Boot, expired: list[int]) -> LeaseWatch:
    return LeaseWatch(LeaseTerms(7, int(deadline_s * S)), tmp_path, lambda: expired.append(1), now_ns=boot)


def test_a_lease_serves_until_its_deadline_then_never_again(tmp_path: Path) -> None:
    boot, expired = Boot(100 * S), list[int]()
    lease = watch(tmp_path, 101, boot, expired)
    assert lease.may_serve()
    boot.ns = 101 * S
    assert not lease.may_serve() and expired == [1]
    boot.ns = 50 * S  # nothing brings it back, not even a clock that seemed to go back
    assert not lease.may_serve() and expired == [1]


def test_the_host_moves_the_deadline_on_with_the_lease_file_of_the_same_generation(tmp_path: Path) -> None:
    boot, expired = Boot(100 * S), list[int]()
    lease = watch(tmp_path, 101, boot, expired)
    (tmp_path / wire_lease.LEASE_FILE).write_bytes(render(LeaseTerms(7, 130 * S)))
    boot.ns = 120 * S
    assert lease.may_serve() and lease.terms.deadline_ns == 130 * S
    (tmp_path / wire_lease.LEASE_FILE).write_bytes(render(LeaseTerms(8, 200 * S)))  # another generation's
    boot.ns = 131 * S
    assert not lease.may_serve() and expired == [1]


def test_a_damaged_lease_file_leaves_the_deadline_as_it_was(tmp_path: Path) -> None:
    boot, expired = Boot(100 * S), list[int]()
    lease = watch(tmp_path, 101, boot, expired)
    (tmp_path / wire_lease.LEASE_FILE).write_bytes(b"{not json" + b" " * 600)
    boot.ns = 102 * S
    assert not lease.may_serve()


async def test_a_request_past_the_deadline_gets_no_answer_at_all(tmp_path: Path) -> None:
    boot, expired = Boot(100 * S), list[int]()
    lease = watch(tmp_path, 101, boot, expired)

    async def answer(request: Request) -> Answer:
        boot.ns = 102 * S  # the machine slept while the answer was being made
        return Answer(200, [], b"{}")
    guarded = lease.guard(answer)
    request = Request("GET", "/status", {}, {}, "127.0.0.1", None)  # type: ignore[arg-type]
    with pytest.raises(LeaseExpired):
        await guarded(request)
    assert isinstance(LeaseExpired("gone"), OSError)  # the HTTP server resets the connection on an OSError
    with pytest.raises(LeaseExpired):
        await guarded(request)


def test_lease_variables_come_both_or_neither() -> None:
    assert terms_from_env({}) is None
    assert terms_from_env(env_of(LeaseTerms(3, 42))) == LeaseTerms(3, 42)
    for env in ({"CADRE_GENERATION": "3"}, {"CADRE_LEASE_DEADLINE": "5"},
                {"CADRE_GENERATION": "0", "CADRE_LEASE_DEADLINE": "5"},
                {"CADRE_GENERATION": "x", "CADRE_LEASE_DEADLINE": "5"}):
        with pytest.raises(Invalid):
            terms_from_env(env)


def test_a_node_config_with_half_a_lease_is_a_config_error(tmp_path: Path) -> None:
    env = {"CADRE_NODE_ID": "n", "CADRE_NODE_DIR": str(tmp_path), "CADRE_API_HOST": "127.0.0.1",
           "CADRE_API_PORT": "4000", "CADRE_P2P_PORT": "4001", "CADRE_ADVERTISE_HOST": "127.0.0.1",
           "CADRE_CLAIM_SECRET": "s" * 24}
    assert load_config(env).lease is None
    assert load_config({**env, **env_of(LeaseTerms(2, 9))}).lease == LeaseTerms(2, 9)
    with pytest.raises(ConfigError, match="CADRE_LEASE_DEADLINE"):
        load_config({**env, "CADRE_GENERATION": "2"})


def test_the_lease_file_format_is_checked() -> None:
    assert parse(render(LeaseTerms(5, 10))) == LeaseTerms(5, 10)
    for bad in (b"[]", b'{"version": 2, "generation": 1, "deadline_ns": 1}',
                b'{"version": 1, "generation": true, "deadline_ns": 1}', b"x" * 600):
        with pytest.raises(Invalid):
            parse(bad)
    assert json.loads(render(LeaseTerms(5, 10)))["version"] == 1


def test_the_boot_clock_of_each_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    for platform in ("linux", "darwin", "win32"):
        monkeypatch.setattr("cadre_desktop.wire.lease.sys.platform", platform)
        first = boot_ns()
        assert isinstance(first, int) and boot_ns() >= first


def _in(seconds: float) -> dict[str, str]:
    return env_of(LeaseTerms(4, boot_ns() + int(seconds * S)))


def test_a_node_started_past_its_deadline_never_listens(nodes: NodeLauncher) -> None:
    done = nodes.run_to_exit(nodes.env_for("late", extra=env_of(LeaseTerms(4, max(0, boot_ns() - S)))))
    assert done.returncode == ExitCode.LEASE_EXPIRED
    assert "lease" in done.stderr


async def test_a_node_stops_serving_by_itself_at_its_deadline(nodes: NodeLauncher) -> None:
    node = await nodes.start("soon", extra=_in(2.0))
    assert (await node.status())["generation"] == 4
    assert await node.wait_exit(deadline_s=15.0) == ExitCode.LEASE_EXPIRED
    with pytest.raises(aiohttp.ClientError):
        await node.get("/status", timeout=2.0)


async def test_a_node_whose_host_moves_its_deadline_on_keeps_serving(nodes: NodeLauncher) -> None:
    node = await nodes.start("renewed", extra=_in(1.5))
    lease_file = node.node_dir / wire_lease.LEASE_FILE
    lease_file.write_bytes(render(LeaseTerms(4, boot_ns() + 60 * S)))
    until = boot_ns() + int(2.5 * S)
    await poll(lambda: boot_ns() > until, deadline_s=10.0, what="the first deadline to pass")
    assert node.running and (await node.status())["generation"] == 4
    lease_file.write_bytes(render(LeaseTerms(4, boot_ns())))  # the host lost its lease: stop now
    assert await node.wait_exit(deadline_s=15.0) == ExitCode.LEASE_EXPIRED


def test_a_lease_file_left_from_before_the_start_is_not_this_run_s(tmp_path: Path) -> None:
    """Regression (the never-twice bench): a failover node started under its host's fresh terms read the
    `lease.json` an earlier run had left, with an earlier deadline, and stopped at once; after a reboot
    such a file's boot-clock deadline could even lie ahead, and a node started past its deadline served."""
    boot, expired = Boot(100 * S), list[int]()
    (tmp_path / wire_lease.LEASE_FILE).write_bytes(render(LeaseTerms(7, 100 * S)))  # an earlier run's, past
    lease = watch(tmp_path, 110, boot, expired)
    boot.ns = 105 * S
    assert lease.may_serve() and lease.terms.deadline_ns == 110 * S
    (tmp_path / wire_lease.LEASE_FILE).unlink()
    (tmp_path / wire_lease.LEASE_FILE).write_bytes(render(LeaseTerms(7, 130 * S)))  # the host's, after the start
    boot.ns = 120 * S
    assert lease.may_serve() and lease.terms.deadline_ns == 130 * S
    late, gone = list[int](), tmp_path / "late"
    gone.mkdir()
    (gone / wire_lease.LEASE_FILE).write_bytes(render(LeaseTerms(7, 10**6 * S)))  # another boot's: far ahead
    started_past = LeaseWatch(LeaseTerms(7, 1), gone, lambda: late.append(1), now_ns=boot)
    assert not started_past.may_serve() and late == [1]
