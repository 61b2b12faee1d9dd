"""The probe's readings of /status, with a fake fetch and clock."""

from __future__ import annotations

import pytest

from cadre_desktop.host.core.events import EventKind
from cadre_desktop.host.core.records.records import NodeMode, NodeStatus
from cadre_desktop.host.core.supervision.probe import STEADY_FACTOR, WAIT_S
from tests.support.clock import settle
from tests.support.rig import Rig, WaitingAnswers


@pytest.fixture
async def rig(tmp_path):
    r = Rig(tmp_path)
    yield r
    await r.probe.stop()
    await r.close()


def status(state, cadre=None, error=None, peer="cn1peer"):
    return {"node_id": "n1", "peer_id": peer, "state": state, "cadre": cadre, "error": error, "version": "1"}


def port_of(rig, node_id="n1"):
    return rig.orch.get(rig.store.get(node_id).handle).api_port


async def test_claimed_node_becomes_joined_with_its_cadre(rig):
    rig.node(status=NodeStatus.UNCLAIMED, live=True)
    rig.answers.by_port[port_of(rig)] = status("joined", cadre="family")
    await rig.probed()
    rec = rig.store.get("n1")
    assert rec.status is NodeStatus.JOINED and rec.cadre == "family" and rec.peer_id == "cn1peer"
    claimed = [e for e in rig.seen if e.kind is EventKind.CLAIMED]
    assert len(claimed) == 1 and claimed[0].detail == "family"
    await rig.probed()
    assert len([e for e in rig.seen if e.kind is EventKind.CLAIMED]) == 1  # one per claim


async def test_failed_invitation_becomes_error_with_the_nodes_reason_and_stops(rig):
    rig.node(status=NodeStatus.JOINING, live=True, mode=NodeMode.INVITATION)
    handle = rig.store.get("n1").handle
    rig.answers.by_port[port_of(rig)] = status("failed", error="invitation already used")
    await rig.probe.probe_all()
    assert rig.store.get("n1").status is NodeStatus.JOINING and rig.orch.stopped == []  # the probe only observes
    await rig.sup.reconcile()  # the supervisor's pass decides, and stops the child on its queue
    rec = rig.store.get("n1")
    assert rec.status is NodeStatus.ERROR
    assert rec.error == "invitation failed: invitation already used"
    assert rig.orch.stopped == [handle]
    assert rig.orch.removed == []
    assert [e.kind for e in rig.seen if e.kind is EventKind.GAVE_UP]


async def test_unclaimed_answer_only_fills_the_peer_id(rig):
    rig.node(status=NodeStatus.UNCLAIMED, live=True)
    rig.answers.by_port[port_of(rig)] = status("unclaimed")
    await rig.probed()
    rec = rig.store.get("n1")
    assert rec.status is NodeStatus.UNCLAIMED and rec.peer_id == "cn1peer"


async def test_a_node_that_answered_then_went_silent_is_reported_unresponsive_never_stopped(rig):
    rig.node(status=NodeStatus.JOINED, live=True)
    rig.store.put(rig.store.get("n1").replace(peer_id="cn1peer"))  # its answer holds no news for the record
    handle = rig.store.get("n1").handle
    reported: list[str] = []
    rig.probe.on_news = reported.append
    rig.answers.by_port[port_of(rig)] = status("joined")
    await rig.probe.probe_all()
    rig.answers.by_port[port_of(rig)] = None
    steady = rig.probe.interval_s * STEADY_FACTOR  # a joined node is asked this far apart
    await rig.clock.run_for(3 * steady)  # its silence is judged against three of its periods
    await rig.probe.probe_all()
    assert reported == [] and not rig.probe.unresponsive(handle)
    await rig.clock.run_for(steady)
    await rig.probe.probe_all()
    assert reported == ["n1"] and rig.probe.unresponsive(handle)
    assert rig.orch.stopped == []  # judging is the supervisor's


async def test_a_node_that_never_answered_is_not_unresponsive_its_start_grace_is_the_supervisors(rig):
    rig.node(status=NodeStatus.JOINED, live=True)
    await rig.probe.probe_all()
    await rig.clock.run_for(100)
    await rig.probe.probe_all()
    assert not rig.probe.unresponsive(rig.store.get("n1").handle)


async def test_an_answer_resets_the_grace(rig):
    rig.node(status=NodeStatus.JOINED, live=True)
    port = port_of(rig)
    rig.answers.by_port[port] = status("joined")
    await rig.probe.probe_all()
    await rig.clock.run_for(14)
    await rig.probe.probe_all()
    rig.answers.by_port[port] = None
    await rig.clock.run_for(14)
    await rig.probe.probe_all()
    assert not rig.probe.unresponsive(rig.store.get("n1").handle)


async def test_down_and_unsupervised_nodes_are_not_probed(rig):
    rig.node("a", status=NodeStatus.JOINED, live=False)
    rig.node("b", status=NodeStatus.ERROR, live=True)
    await rig.probe.probe_all()
    assert rig.answers.calls == []


async def test_answer_for_a_replaced_child_is_not_applied(rig):
    rig.node(status=NodeStatus.UNCLAIMED, live=True)
    rec = rig.store.get("n1")
    rig.answers.by_port[port_of(rig)] = status("joined", cadre="x")
    # The record moves on to another child before the answer is applied.
    real_fetch = rig.answers.__call__

    async def fetch(port):
        rig.store.put(rig.store.get("n1").replace(handle="n1.other"))
        return await real_fetch(port)

    rig.probe.fetch = fetch
    await rig.probe.probe_one(rec)
    await rig.sup.reconcile()
    assert rig.store.get("n1").status is NodeStatus.UNCLAIMED


async def test_hostile_text_in_a_status_answer_is_made_one_bounded_printable_line(rig):
    rig.node(status=NodeStatus.UNCLAIMED, live=True)
    rig.answers.by_port[port_of(rig)] = status("joined", cadre="fam\x1b]0;pwned\x07ily\n" + "x" * 500)
    await rig.probed()
    cadre = rig.store.get("n1").cadre
    assert cadre.isprintable() and "\x1b" not in cadre and len(cadre) <= 128


async def test_first_answer_of_a_child_says_it_is_ready(rig):
    rig.node(status=NodeStatus.JOINED, live=True)
    rec = rig.store.get("n1")
    rig.store.put(rec.replace(peer_id="cn1peer"))
    rig.answers.by_port[port_of(rig)] = status("joined")
    assert not rig.probe.is_ready(rec.handle)
    await rig.probe.probe_all()
    assert rig.probe.is_ready(rec.handle)
    assert [e.kind for e in rig.seen] == [EventKind.CHANGED]
    await rig.probe.probe_all()
    assert [e.kind for e in rig.seen] == [EventKind.CHANGED]  # nothing new, nothing sent


async def test_first_answer_spends_the_start_mark(rig):
    rig.node(status=NodeStatus.JOINED, live=True, answered=False)
    assert rig.store.get("n1").start.answered is False
    rig.answers.by_port[port_of(rig)] = status("joined")
    await rig.probed()
    assert rig.store.get("n1").start.answered is True


async def test_a_starting_child_is_watched_until_it_first_answers_and_no_longer(rig):
    rig.probe.interval_s = 60
    rig.probe.start()
    await settle()
    rig.node(status=NodeStatus.UNCLAIMED, live=True)
    port = port_of(rig)
    rig.answers.calls.clear()
    rig.probe.watch_node("n1")
    await settle()
    assert rig.answers.calls == [port]  # at once, not at the end of the interval
    await rig.clock.run_for(0.25)
    await settle()
    assert len(rig.answers.calls) == 2
    rig.answers.by_port[port] = status("unclaimed")
    await rig.clock.run_for(0.25)
    await settle()
    assert rig.probe.is_ready(rig.store.get("n1").handle)
    calls = len(rig.answers.calls)
    await rig.clock.run_for(0.4)  # the probe's own pass comes at NEWS_S, not before
    await settle()
    assert len(rig.answers.calls) == calls and "n1" not in rig.probe._starting  # ready: the watch is over
    await rig.probe.stop()


async def test_the_probe_only_observes_and_tells_the_supervisor_of_news(rig):
    rig.node(status=NodeStatus.UNCLAIMED, live=True, answered=False)
    reported: list[str] = []
    rig.probe.on_news = reported.append
    rig.answers.by_port[port_of(rig)] = status("joined", cadre="family")
    await rig.probe.probe_all()
    rec = rig.store.get("n1")
    assert rec.status is NodeStatus.UNCLAIMED and not rec.start.answered and rec.peer_id is None  # nothing written
    assert reported == ["n1"]
    await rig.sup.reconcile()  # the pass the news asks for writes it, in one write
    rec = rig.store.get("n1")
    assert rec.status is NodeStatus.JOINED and rec.cadre == "family" and rec.start.answered and rec.peer_id == "cn1peer"


async def test_a_steady_node_is_asked_rarely_and_a_node_awaiting_its_claim_every_two_seconds(rig):
    """Issue 26: a quiet probe. A joined node's exit is seen through the driver at once, so it is
    asked every STEADY_FACTOR intervals; an unclaimed one every NEWS_S, so a claim shows fast."""
    rig.probe.interval_s = 5
    rig.node("j", status=NodeStatus.JOINED, live=True)
    rig.node("u", status=NodeStatus.UNCLAIMED, live=True)
    ports = {n: rig.orch.get(rig.store.get(n).handle).api_port for n in ("j", "u")}
    rig.answers.by_port[ports["j"]] = status("joined")
    rig.answers.by_port[ports["u"]] = status("unclaimed")
    rig.probe.start()
    await settle()
    for _ in range(60):  # one minute, a look a second
        await rig.clock.run_for(1)
        await settle()
    asked = {n: rig.answers.calls.count(port) for n, port in ports.items()}
    assert 28 <= asked["u"] <= 32, asked  # every NEWS_S (2 s)
    assert asked["j"] <= 1 + 60 // (5 * STEADY_FACTOR) + 1, asked
    await rig.probe.stop()


async def test_a_claim_from_the_phone_is_seen_within_two_seconds(rig):
    rig.probe.interval_s = 5
    rig.node(status=NodeStatus.UNCLAIMED, live=True)
    port = port_of(rig)
    rig.answers.by_port[port] = status("unclaimed")
    news: list[str] = []
    rig.probe.on_news = news.append
    rig.probe.start()
    await settle()
    await rig.clock.run_for(0.5)
    await settle()
    news.clear()
    rig.answers.by_port[port] = status("joined", cadre="Family")  # claimed on the phone, now
    for _ in range(8):
        await rig.clock.run_for(0.25)
        await settle()
    assert set(news) == {"n1"}, "the claim was not seen within 2 s"
    await rig.probe.stop()


@pytest.fixture
def waiting(rig):
    """The rig's probe long-polls (as the host's does), over a fake node that honours the wait."""
    rig.answers = WaitingAnswers(rig.clock)
    rig.probe.fetch = rig.answers
    rig.probe.long_poll_s = WAIT_S
    return rig


async def test_a_claim_is_seen_the_moment_it_happens_with_the_long_poll_and_no_asking_meanwhile(waiting):
    rig = waiting
    rig.probe.interval_s = 5
    rig.node(status=NodeStatus.UNCLAIMED, live=True)
    port = port_of(rig)
    rig.answers.say(port, status("unclaimed"))
    news: list[str] = []
    rig.probe.on_news = news.append
    rig.probe.start()
    for _ in range(60):  # a quiet minute, a look a second
        await rig.clock.run_for(1)
    assert rig.answers.waits, "the probe never waited on the node"
    assert rig.answers.calls.count(port) <= 1 + 60 // WAIT_S + 1, rig.answers.calls  # not 30, one every 2 s
    news.clear()
    rig.answers.say(port, status("joined", cadre="Family"))  # claimed on the phone, now
    await settle(20)
    assert set(news) == {"n1"}, "the claim was not seen at once"
    await rig.probe.stop()


async def test_a_node_that_ignores_the_wait_is_asked_every_two_seconds_as_before(rig):
    rig.probe.long_poll_s = WAIT_S  # the rig's plain Answers ignore the query and answer at once
    rig.node("u", status=NodeStatus.UNCLAIMED, live=True)
    port = port_of(rig, "u")
    rig.answers.by_port[port] = status("unclaimed")
    rig.probe.start()
    await settle()
    for _ in range(60):
        await rig.clock.run_for(1)
    assert 28 <= rig.answers.calls.count(port) <= 32, rig.answers.calls
    await rig.probe.stop()


async def test_a_long_poll_that_fails_judges_silence_from_when_its_answer_was_due(waiting):
    rig = waiting
    rig.node(status=NodeStatus.UNCLAIMED, live=True)
    port = port_of(rig)
    rig.answers.say(port, status("unclaimed"))
    handle = rig.store.get("n1").handle
    rig.probe.start()
    await settle()
    await rig.clock.run_for(2.5)
    assert rig.answers.waits
    rig.answers.by_port[port] = None  # hung: the long-poll in flight ends with no answer, none after
    for _ in range(int(WAIT_S) + 10):  # the wait, then 10 s of plain asks that fail
        await rig.clock.run_for(1)
        assert not rig.probe.unresponsive(handle)  # 25 s without an answer is the wait, not silence
    for _ in range(10):
        await rig.clock.run_for(1)
    assert rig.probe.unresponsive(handle)
    waits = len(rig.answers.waits)
    for _ in range(10):
        await rig.clock.run_for(1)
    assert len(rig.answers.waits) == waits, "a node that does not answer is asked plainly, not waited on"
    await rig.probe.stop()


async def test_with_every_waiting_node_waited_on_the_probe_passes_only_every_interval(waiting):
    """The tray's idle CPU with 30 unclaimed nodes: no pass every two seconds when nobody needs one."""
    rig = waiting
    rig.probe.interval_s = 5
    for node_id in ("a", "b", "c"):
        rig.node(node_id, status=NodeStatus.UNCLAIMED, live=True)
        rig.answers.say(port_of(rig, node_id), status("unclaimed"))
    passes = 0
    probe_all = rig.probe.probe_all

    async def counted():
        nonlocal passes
        passes += 1
        await probe_all()

    rig.probe.probe_all = counted
    rig.probe.start()
    for _ in range(60):
        await rig.clock.run_for(1)
    assert len(set(rig.answers.waits)) == 3
    assert passes <= 60 // 5 + 3, passes  # not 30
    await rig.probe.stop()


async def test_a_probe_the_host_could_not_make_for_want_of_descriptors_is_no_silence(rig):
    """A healthy node was judged unresponsive while the host was out of descriptors."""
    from cadre_desktop.errors import OutOfDescriptors

    rig.node(status=NodeStatus.JOINED, live=True)
    rig.store.put(rig.store.get("n1").replace(peer_id="cn1peer"))
    handle = rig.store.get("n1").handle
    reported: list[str] = []
    rig.probe.on_news = reported.append
    rig.answers.by_port[port_of(rig)] = status("joined")
    await rig.probe.probe_all()

    async def short(_port):
        raise OutOfDescriptors("no descriptor left")

    rig.probe.fetch = short
    steady = rig.probe.interval_s * STEADY_FACTOR
    for _ in range(6):  # twice its grace of three periods, asked at each
        await rig.clock.run_for(steady)
        await rig.probe.probe_all()
    assert reported == [] and not rig.probe.unresponsive(handle)
    rig.probe.fetch = rig.answers.__call__
    rig.answers.by_port[port_of(rig)] = None  # a silence once it can ask again counts as before
    for _ in range(4):
        await rig.clock.run_for(steady)
        await rig.probe.probe_all()
    assert reported == ["n1"] and rig.probe.unresponsive(handle)


async def test_the_status_fetch_tells_a_descriptor_shortage_from_a_silence(monkeypatch):
    import errno

    from cadre_desktop.errors import OutOfDescriptors
    from cadre_desktop.host.core.supervision.probe import HttpStatusFetcher

    fetcher = HttpStatusFetcher("127.0.0.1", 1.0)
    failure: list[OSError] = [OSError(errno.EMFILE, "Too many open files")]

    async def connect(*_args, **_kwargs):
        raise failure[0]

    monkeypatch.setattr("cadre_desktop.net.httpclient.asyncio.open_connection", connect)
    try:
        with pytest.raises(OutOfDescriptors):
            await fetcher(9)
        failure[0] = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
        assert await fetcher(9) is None
    finally:
        await fetcher.close()
