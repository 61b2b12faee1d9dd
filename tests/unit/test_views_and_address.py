"""The engine's read model typed with NodeStatus, its JSON unchanged; the address policy; the one listener list."""

import json

import pytest

from cadre_desktop.host.core.events import Listeners
from cadre_desktop.host.core.ops.address import ConfiguredAddress
from cadre_desktop.host.core.ops.views import NodeView
from cadre_desktop.host.core.records.records import NodeStatus
from cadre_desktop.settings import Settings


def make_view(node_id: str, name: str, status: str) -> NodeView:
    # a plain string on purpose: the view turns it into the enum member, or refuses it
    return NodeView(id=node_id, name=name, status=status,  # type: ignore[arg-type]
                    mode="claim", running=False, ready=False, pid=None,
                    api_port=None, p2p_port=None, peer_id=None, cadre=None, attempts=0, next_retry_at=None,
                    last_error=None, claim_url=None, advertise_host="127.0.0.1", created_at="", updated_at="",
                    started_at=None, log_path="/tmp/node-n-1.log")


def test_a_view_status_is_the_enum_member_and_its_json_is_the_plain_value():
    view = make_view("n-1", "kitchen", "joined")
    assert view.status is NodeStatus.JOINED
    assert view.to_json()["status"] == "joined" and type(view.to_json()["status"]) is str
    assert json.dumps(view.to_json(), sort_keys=True).count('"status": "joined"') == 1
    assert f"{view.status}" == "joined"  # as words in a message, the same as before


def test_a_view_with_an_unknown_status_is_refused():
    with pytest.raises(ValueError):
        make_view("n-1", "kitchen", "claimed")


def test_the_configured_address_is_re_read_and_a_broken_file_keeps_the_last_setting(tmp_path):
    file = tmp_path / "settings.json"
    source = ConfiguredAddress(file, Settings(advertise_host="192.0.2.1"))
    file.write_text('{"advertise_host": "192.0.2.2"}')
    assert source() == "192.0.2.2"
    file.write_text("{broken")
    assert source() == "192.0.2.2"
    file.write_text('{"advertise_host": "nas.local"}')
    assert source() == "nas.local"


def test_a_listener_that_raises_does_not_stop_the_others_and_removal_is_idempotent():
    heard: list[int] = []
    listeners: Listeners[int] = Listeners("test")

    def boom(item: int) -> None:
        raise ZeroDivisionError(item)
    listeners.add(boom)
    remove = listeners.add(heard.append)
    listeners.tell(1)
    remove()
    remove()
    listeners.tell(2)
    assert heard == [1]


def test_both_kinds_of_view_are_supervised_views():
    """The shared base the front ends read through: every field it names is a field of both views."""
    import dataclasses

    from cadre_desktop.host.core.ops.views import NodeView, SupervisedView
    from cadre_desktop.host.lending.views import DonationView

    shared = {name for name, value in vars(SupervisedView).items() if isinstance(value, property)}
    assert len(shared) >= 15
    for view in (NodeView, DonationView):
        assert shared <= {f.name for f in dataclasses.fields(view)}, view
