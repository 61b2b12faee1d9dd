"""Errors as the UI meets them. It asks the engine about a node that may be gone by then:
only that (NoSuchThing) is expected and answered quietly; any other error is a bug and is
not swallowed. A bug of ours is shown as unexpected, never in its developer's words."""

from __future__ import annotations

import os
from types import SimpleNamespace

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

from cadre_desktop.errors import NoSuchThing  # noqa: E402
from cadre_desktop.ui.actions import Actions  # noqa: E402
from cadre_desktop.ui.lending.lent_core import lent_notice_view  # noqa: E402
from cadre_desktop.ui.tray.notify import Notifier  # noqa: E402


class Engine:
    """Answers every question with `error`, as a host whose node (or loan) is gone would."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.lending = SimpleNamespace(views=SimpleNamespace(donation=self.fail))

    def fail(self, node_id: str):
        raise self.error

    get_node = fail


def test_a_removed_node_is_named_by_its_id():
    # the method alone, on a stand-in that has only the host it reads
    assert Actions._name(SimpleNamespace(host=Engine(NoSuchThing("gone"))), "n-1") == "n-1"  # type: ignore[arg-type]


def test_a_lent_node_whose_loan_ended_has_no_notice():
    assert lent_notice_view(Engine(NoSuchThing("gone")), "d-1") is None


def test_a_node_the_host_does_not_know_is_looked_for_among_the_lent_ones():
    # the method alone, on a stand-in that has only the host it reads
    assert Notifier._view(SimpleNamespace(host=Engine(NoSuchThing("gone"))), "d-1") is None  # type: ignore[arg-type]


@pytest.mark.parametrize("ask", [  # the methods alone, on stand-ins that have only the host they read
    lambda engine: Actions._name(SimpleNamespace(host=engine), "n-1"),  # type: ignore[arg-type]
    lambda engine: lent_notice_view(engine, "d-1"),
    lambda engine: Notifier._view(SimpleNamespace(host=engine), "n-1"),  # type: ignore[arg-type]
], ids=["action name", "lent notice", "notifier view"])
def test_any_other_error_is_a_bug_and_is_not_swallowed(ask):
    with pytest.raises(RuntimeError, match="our bug"):
        ask(Engine(RuntimeError("our bug")))


def test_a_bug_of_ours_is_shown_as_unexpected_not_in_its_developer_words():
    from cadre_desktop.errors import Bug, InvalidState
    from cadre_desktop.ui.errors import error_text

    assert "Something unexpected went wrong" in error_text(Bug("finish may not leave node n-1 spawning"))
    assert error_text(InvalidState("Node a is running.")) == "Node a is running."
