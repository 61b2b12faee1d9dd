"""The control API over real loopback HTTP, against a fake host."""

import asyncio
import json
import logging
import os
import stat
from datetime import UTC, datetime, timedelta, timezone

import aiohttp
import pytest

from cadre_desktop import __version__
from cadre_desktop.errors import SecretsError
from cadre_desktop.host.core.events import EventKind
from cadre_desktop.host.edges.control import ControlServer
from cadre_desktop.host.edges.control_body import MAX_BODY
from tests.support.fake_host import ExplodingHost, FakeHost, make_view


@pytest.fixture
async def api(tmp_path):
    host = FakeHost(tmp_path)
    server = ControlServer(host, tmp_path / "control.json", heartbeat_s=0.05)
    await server.start()
    async with aiohttp.ClientSession() as session:
        yield Api(server, host, session)
    await server.stop()


class Api:
    def __init__(self, server, host, session):
        self.server, self.host, self.session = server, host, session

    def auth(self, **extra):
        return {"Authorization": f"Bearer {self.server.token}", **extra}

    async def call(self, method, path, *, headers=None, **kw):
        headers = self.auth() if headers is None else headers
        async with self.session.request(method, self.server.url + path, headers=headers, **kw) as resp:
            body = await resp.json(content_type=None)
            return resp.status, body


def assert_error(status_body, status, code=None):
    got, body = status_body
    assert got == status, body
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    if code:
        assert body["error"]["code"] == code


# -- control.json and the socket ------------------------------------------------------

async def test_control_file_names_url_token_and_pid_with_mode_0600(api):
    path = api.server.control_file
    doc = json.loads(path.read_text())
    assert doc == {"version": 1, "url": api.server.url, "token": api.server.token, "pid": os.getpid()}
    assert doc["url"].startswith("http://127.0.0.1:")
    assert len(doc["token"]) >= 40
    if os.name == "posix":
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_listens_on_loopback_only(api):
    assert api.server._http is not None and api.server._http.addresses == [("127.0.0.1", api.server.port)]
    with pytest.raises(ValueError):
        ControlServer(api.host, api.server.control_file, bind="0.0.0.0")


async def test_stop_removes_control_file_only_when_it_is_still_ours(tmp_path):
    host = FakeHost(tmp_path)
    ours = ControlServer(host, tmp_path / "control.json")
    await ours.start()
    await ours.stop()
    assert not (tmp_path / "control.json").exists()

    again = ControlServer(host, tmp_path / "control.json")
    await again.start()
    (tmp_path / "control.json").write_text(json.dumps({"token": "someone-else", "pid": 1}))
    await again.stop()
    assert json.loads((tmp_path / "control.json").read_text())["token"] == "someone-else"


async def test_each_start_gets_a_fresh_token(tmp_path):
    host = FakeHost(tmp_path)
    tokens = set()
    for _ in range(2):
        server = ControlServer(host, tmp_path / "control.json")
        await server.start()
        tokens.add(server.token)
        await server.stop()
    assert len(tokens) == 2


# -- guards ------------------------------------------------------------------------------

async def test_no_token_is_401_with_json_error(api):
    assert_error(await api.call("GET", "/api/nodes", headers={}), 401, "unauthorized")


async def test_wrong_token_is_401(api):
    assert_error(await api.call("GET", "/api/nodes", headers={"Authorization": "Bearer nope"}), 401)
    assert_error(await api.call("GET", "/api/nodes", headers={"Authorization": api.server.token}), 401)


async def test_unknown_route_without_token_is_401_not_404(api):
    assert_error(await api.call("GET", "/api/secret-things", headers={}), 401)


async def test_token_in_query_string_is_refused_even_when_right(api):
    status_body = await api.call("GET", f"/api/nodes?token={api.server.token}", headers={})
    assert_error(status_body, 400, "token_in_url")
    assert_error(await api.call("GET", f"/api/nodes?access_token={api.server.token}"), 400, "token_in_url")


async def test_any_query_parameter_is_refused(api):
    assert_error(await api.call("GET", "/api/nodes?verbose=1"), 400, "bad_request")


async def test_request_with_an_origin_is_refused(api):
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{api.server.port}"):
        assert_error(await api.call("GET", "/api/nodes", headers=api.auth(Origin=origin)), 403, "origin_refused")


async def test_cross_site_fetch_is_refused(api):
    assert_error(await api.call("GET", "/api/nodes", headers=api.auth(**{"Sec-Fetch-Site": "cross-site"})), 403)


async def test_foreign_host_header_is_refused(api):
    for host in ("evil.example", f"evil.example:{api.server.port}", "127.0.0.1:1"):
        assert_error(await api.call("GET", "/api/nodes", headers=api.auth(Host=host)), 403, "forbidden")


async def test_localhost_host_header_is_accepted(api):
    status, _ = await api.call("GET", "/api/nodes", headers=api.auth(Host=f"localhost:{api.server.port}"))
    assert status == 200


# -- routes ------------------------------------------------------------------------------

async def test_host_info(api):
    status, body = await api.call("GET", "/api/host")
    assert status == 200
    assert body == {"pid": os.getpid(), "version": __version__, "home": str(api.host.paths.data_dir),
                    "pause": {"paused": False}}


async def test_list_nodes(api):
    api.host.put(make_view("n-1", "one"))
    status, body = await api.call("GET", "/api/nodes")
    assert status == 200
    assert body == {"nodes": [make_view("n-1", "one").to_json()]}


async def test_get_node_and_unknown_node(api):
    api.host.put(make_view("n-1", "one"))
    status, body = await api.call("GET", "/api/nodes/n-1")
    assert (status, body["id"], body["claim_url"]) == (200, "n-1", make_view("n-1", "one").claim_url)
    assert_error(await api.call("GET", "/api/nodes/nope"), 404, "not_found")
    assert_error(await api.call("GET", "/api/nodes/.."), 404)


async def test_add_node_is_201_with_the_view(api):
    status, body = await api.call("POST", "/api/nodes", json={"name": "  kitchen  "})
    assert status == 201
    assert body["name"] == "kitchen" and body["status"] == "unclaimed"
    assert api.host.calls == [("add", "kitchen")]
    status, body = await api.call("POST", "/api/nodes")
    assert status == 201 and api.host.calls[-1] == ("add", None)


@pytest.mark.parametrize("body", [
    {"name": ""}, {"name": "x" * 65}, {"name": 3}, {"name": "tab\there"}, {"nmae": "typo"},
])
async def test_add_node_validates_its_body(api, body):
    assert_error(await api.call("POST", "/api/nodes", json=body), 400, "bad_request")
    assert api.host.calls == []


async def test_bad_json_and_non_object_are_400(api):
    assert_error(await api.call("POST", "/api/nodes", data=b"{nope"), 400, "bad_request")
    assert_error(await api.call("POST", "/api/nodes", data=b"[1, 2]"), 400, "bad_request")


async def test_body_over_64_kib_is_413(api):
    big = json.dumps({"name": "x" * (MAX_BODY + 10)}).encode()
    assert_error(await api.call("POST", "/api/nodes", data=big), 413, "too_large")

    async def chunks():  # no Content-Length: caught while reading
        for _ in range(MAX_BODY // 1024 + 2):
            yield b" " * 1024
    assert_error(await api.call("POST", "/api/nodes", data=chunks()), 413, "too_large")
    assert api.host.calls == []


async def test_join_node_is_201_and_passes_the_invitation(api):
    status, body = await api.call("POST", "/api/nodes/join", json={"invitation": " inv-123\n", "name": "j"})
    assert status == 201 and body["status"] == "joining"
    assert api.host.calls == [("join", "inv-123", "j")]


@pytest.mark.parametrize("body", [{}, {"invitation": ""}, {"invitation": 5}, {"invitation": "x" * 4097}])
async def test_join_node_validates_the_invitation(api, body):
    assert_error(await api.call("POST", "/api/nodes/join", json=body), 400, "bad_request")


@pytest.mark.parametrize("action", ["retry", "restart", "regenerate"])
async def test_actions_answer_the_view(api, action):
    api.host.put(make_view("n-1", "one", "error" if action == "retry" else "unclaimed"))
    status, body = await api.call("POST", f"/api/nodes/n-1/{action}")
    assert status == 200 and body["id"] == "n-1"
    assert api.host.calls == [(action, "n-1")]


async def test_action_conflict_is_409_with_the_hosts_message(api):
    api.host.put(make_view("n-1", "one", "joined"))
    status_body = await api.call("POST", "/api/nodes/n-1/retry")
    assert_error(status_body, 409, "conflict")
    assert "only a node in error" in status_body[1]["error"]["message"]


async def test_action_on_unknown_node_is_404(api):
    assert_error(await api.call("POST", "/api/nodes/ghost/restart"), 404, "not_found")


async def test_host_error_keeps_its_code_and_status(api):
    api.host.fail_next = SecretsError("The keyring is locked.", code="keyring_locked")
    assert_error(await api.call("POST", "/api/nodes", json={}), 503, "keyring_locked")


async def test_remove_node_twice_is_not_an_error(api):
    api.host.put(make_view("n-1", "one"))
    assert await api.call("DELETE", "/api/nodes/n-1") == (200, {"removed": "n-1", "existed": True, "orphan_pids": []})
    assert await api.call("DELETE", "/api/nodes/n-1") == (200, {"removed": "n-1", "existed": False, "orphan_pids": []})


async def test_remove_of_an_id_no_record_names_reclaims_its_orphan(api):
    api.host.orphans["n-9"] = [4711]
    assert await api.call("DELETE", "/api/nodes/n-9") == (200, {"removed": "n-9", "existed": False,
                                                               "orphan_pids": [4711]})
    assert ("reclaim", "n-9") in api.host.calls


async def test_wrong_method_is_405_and_unknown_route_404(api):
    assert_error(await api.call("PUT", "/api/nodes"), 405, "method_not_allowed")
    assert_error(await api.call("GET", "/api/nodes/n-1/retry"), 405)
    assert_error(await api.call("GET", "/api/nope"), 404, "not_found")


async def test_unexpected_exception_is_a_generic_500_and_the_secret_is_not_logged(tmp_path, caplog):
    host = ExplodingHost(tmp_path)
    server = ControlServer(host, tmp_path / "control.json")
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(server, host, session)
            with caplog.at_level(logging.DEBUG):
                status_body = await api.call("POST", "/api/nodes/join", json={"invitation": "INVITE-SECRET-42"})
                assert_error(await api.call("POST", "/api/nodes", json={}), 500, "internal_error")
    finally:
        await server.stop()
    assert_error(status_body, 500, "internal_error")
    assert "INVITE-SECRET-42" not in status_body[1]["error"]["message"]
    assert "RuntimeError" in caplog.text
    assert "INVITE-SECRET-42" not in caplog.text
    assert server.token not in caplog.text


# -- events ---------------------------------------------------------------------------------

async def read_event(resp, timeout=5.0):
    """The next `event:` block of an SSE stream, as (kind, data); comments skipped."""
    kind = None
    async with asyncio.timeout(timeout):
        while True:
            line = (await resp.content.readline()).decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[len("event: "):]
            elif line.startswith("data: ") and kind:
                return kind, json.loads(line[len("data: "):])


async def test_events_stream_an_emitted_event_with_the_node_view(api):
    api.host.put(make_view("n-1", "one"))
    async with api.session.get(api.server.url + "/api/events", headers=api.auth()) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        assert await resp.content.readline() == b": connected\n"
        api.host.bus.emit(EventKind.GAVE_UP, "n-1", "it kept crashing")
        kind, data = await read_event(resp)
        assert kind == "gave_up"
        assert data == {"id": "n-1", "node": make_view("n-1", "one").to_json(), "detail": "it kept crashing"}

        api.host.bus.emit(EventKind.REMOVED, "gone")
        assert await read_event(resp) == ("removed", {"id": "gone", "node": None, "detail": ""})


async def test_events_send_heartbeat_comments(api):
    async with api.session.get(api.server.url + "/api/events", headers=api.auth()) as resp:
        await resp.content.readline()
        async with asyncio.timeout(5):
            while (await resp.content.readline()) != b": keep-alive\n":
                pass


async def test_events_need_the_token(api):
    assert_error(await api.call("GET", "/api/events", headers={}), 401)


async def test_stop_ends_open_event_streams(tmp_path):
    host = FakeHost(tmp_path)
    server = ControlServer(host, tmp_path / "control.json")
    await server.start()
    async with aiohttp.ClientSession() as session:
        async with session.get(server.url + "/api/events", headers={"Authorization": f"Bearer {server.token}"}) as resp:
            await resp.content.readline()
            async with asyncio.timeout(5):
                await server.stop()
                assert (await resp.content.read()).strip() == b""
    assert not server._streams


# -- holds: pause and resume ------------------------------------------------------------------

async def test_pause_with_no_body_a_length_or_an_end(api):
    api.host.put(make_view("n-1", "one", "joined"))
    status, body = await api.call("POST", "/api/nodes/n-1/pause", json={})
    assert status == 200 and body["status"] == "paused" and body["held_by"] == "person" and body["wake_at"] is None
    status, body = await api.call("POST", "/api/nodes/n-1/pause", json={"for_ms": 30_000})
    assert status == 200 and body["status"] == "sleeping" and body["wake_at"]
    until = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    stamp = until.astimezone(timezone(timedelta(hours=1))).isoformat()  # "...+01:00"
    status, body = await api.call("POST", "/api/nodes/n-1/pause", json={"until": stamp})
    assert status == 200 and body["wake_at"] == until.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert [c[:3] for c in api.host.calls] == [("pause", "n-1", None), ("pause", "n-1", 30_000), ("pause", "n-1", None)]
    status, body = await api.call("POST", "/api/nodes/n-1/resume")
    assert status == 200 and body["status"] == "joined" and body["wake_at"] is None


@pytest.mark.parametrize("body", [{"for_ms": "30m"}, {"for_ms": True}, {"for_ms": 1.5}, {"until": "07:00"},
                                  {"until": "2999-01-01T07:00:00"}, {"until": 5}, {"when": 1}, [1],
                                  # issue 39 (6): past the calendar in UTC, these answered 500
                                  {"until": "9999-12-31T23:00:00-05:00"}, {"until": "0001-01-01T00:00:00+05:00"}])
async def test_pause_refuses_what_it_cannot_read_with_400(api, body):
    api.host.put(make_view("n-1", "one", "joined"))
    got, answer = await api.call("POST", "/api/nodes/n-1/pause", json=body)
    assert got == 400 and answer["error"]["message"], answer
    assert api.host.calls == []


async def test_pause_until_the_past_is_a_clear_400(api):
    api.host.put(make_view("n-1", "one", "joined"))
    status_body = await api.call("POST", "/api/nodes/n-1/pause", json={"until": "2001-01-01T07:00:00Z"})
    assert_error(status_body, 400)
    assert "in the past" in status_body[1]["error"]["message"]
    assert api.host.get_node("n-1").status == "joined"


async def test_resume_of_a_node_not_held_is_409(api):
    api.host.put(make_view("n-1", "one", "joined"))
    assert_error(await api.call("POST", "/api/nodes/n-1/resume"), 409, "conflict")


# -- every node at once: Pause all, the run conditions ------------------------------------------

async def test_pause_all_with_no_body_a_length_or_an_end_and_resume(api):
    status, body = await api.call("POST", "/api/host/pause", json={})
    assert status == 200 and body["paused"] is True and body["until"] is None
    status, host = await api.call("GET", "/api/host")
    assert status == 200 and host["pause"]["paused"] is True
    status, body = await api.call("POST", "/api/host/pause", json={"for_ms": 1_800_000})
    assert status == 200 and body["until"]
    until = (datetime.now(UTC) + timedelta(hours=8)).replace(microsecond=0)
    status, body = await api.call("POST", "/api/host/pause", json={"until": until.isoformat()})
    assert status == 200 and body["until"] == until.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    status, body = await api.call("POST", "/api/host/resume")
    assert status == 200 and body == {"paused": False}
    assert [c[:2] for c in api.host.calls] == [("pause_all", None), ("pause_all", 1_800_000), ("pause_all", None),
                                             ("resume_all",)]


@pytest.mark.parametrize("body", [{"for_ms": "30m"}, {"until": "07:00"}, {"until": "2001-01-01T07:00:00Z"},
                                  {"for_ms": 0}, {"paused": True}])
async def test_pause_all_refuses_a_bad_body_or_a_time_in_the_past_with_400(api, body):
    status_body = await api.call("POST", "/api/host/pause", json=body)
    assert_error(status_body, 400)
    assert api.host.pause is None


async def test_conditions_are_served_as_json(api):
    status, body = await api.call("GET", "/api/host/conditions")
    assert status == 200 and body["verdict"]["run"] is True and body["pause"] == {"paused": False}
