"""A node backing off after a crash says why, in every view, and host.log's attempt numbers are
the ones the views show (issue 39, item 13)."""

from __future__ import annotations

import logging

from cadre_desktop.host.core.ops.views import NodeViews
from cadre_desktop.host.core.records.records import StartMark
from tests.support.polling import async_wait_until
from tests.support.rig import Rig


def views_of(rig: Rig, tmp_path) -> NodeViews:
    return NodeViews(store=rig.store, driver=rig.orch, supervisor=rig.sup, probe=rig.probe, clock=rig.clock,
                     address=lambda: "127.0.0.1", log_path=lambda i: tmp_path / i, claim_secret=lambda i: None)


async def test_a_node_backing_off_after_a_crash_has_the_crash_in_its_last_error(rig, tmp_path):
    """Regression: the Reason column and `node list`'s last error were empty while the node
    backed off (only the details pane had the exit's words)."""
    rec = rig.node(live=True, attempts=1, ago_s=1)
    rig.orch.logs["n1"] = ["cadre-node: error: disk full"]
    rig.sup._unsubscribe = rig.orch.subscribe(rig.sup._on_exit)
    rig.orch.exit(rec.handle, code=1)
    await rig.sup.reconcile()
    assert rig.sup.decisions.last["n1"]["decision"] == "wait", "the node is not backing off"
    view = views_of(rig, tmp_path).get("n1")
    assert view.next_retry_at is not None and not view.running
    assert view.last_error is not None and "exited with code 1: cadre-node: error: disk full" in view.last_error


async def test_a_running_node_has_no_last_error_from_an_old_crash(rig, tmp_path):
    rec = rig.node(live=True, attempts=1, ago_s=1)
    rig.orch.logs["n1"] = ["cadre-node: error: disk full"]
    rig.sup._unsubscribe = rig.orch.subscribe(rig.sup._on_exit)
    rig.orch.exit(rec.handle, code=1)
    await rig.clock.run_for(30)
    await rig.sup.reconcile()
    await async_wait_until(lambda: rig.orch.spawns_of("n1"), what="the respawn")
    view = views_of(rig, tmp_path).get("n1")
    assert view.running and view.last_error is None, view.last_error


async def test_host_log_numbers_a_start_by_the_attempt_the_views_show(rig, tmp_path, caplog):
    """Regression: host.log said "attempt 13" (the start's number, every start counted) while
    the window said attempt 3 (the budget's)."""
    rig.node(attempts=2, ago_s=60, mark=StartMark(attempt=12, at="2026-01-01T00:00:00Z", answered=True))
    with caplog.at_level(logging.INFO):
        await rig.sup.reconcile()
    await async_wait_until(lambda: rig.orch.spawns_of("n1"), what="the respawn")
    view = views_of(rig, tmp_path).get("n1")
    started = [r.getMessage() for r in caplog.records if "n1 started" in r.getMessage()]
    assert view.attempts == 3 and started, started
    assert "attempt 3" in started[0] and "attempt 13" not in started[0], started


async def test_a_clean_exit_is_no_last_error(rig, tmp_path):
    rec = rig.node(live=True, attempts=1, ago_s=1)
    rig.orch.logs["n1"] = ["bye"]
    rig.sup._unsubscribe = rig.orch.subscribe(rig.sup._on_exit)
    rig.orch.exit(rec.handle, code=0)
    view = views_of(rig, tmp_path).get("n1")
    assert not view.running and view.last_error is None, view.last_error
