"""The CLI against a real ControlServer wrapping a fake host, served from a thread of this process."""

import io
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from cadre_desktop import __version__
from cadre_desktop.cli import commands as cli
from cadre_desktop.host.core.events import EventKind
from cadre_desktop.logs import logtail
from cadre_desktop.paths import resolve_paths
from tests.support.fake_host import make_view
from tests.support.polling import wait_until
from tests.support.served_host import ServedHost

REPO = Path(__file__).parents[2]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("CADRE_DESKTOP_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def served(home):
    served = ServedHost(home)
    yield served
    served.close()


def run(capsys, *argv):
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def no_tty_stdin(monkeypatch):
    def feed(text: str = ""):
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    feed()
    return feed


# -- parsing and usage ----------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["node"], ["node", "frob"], ["node", "show"], ["nodes", "list"], ["--headless", "node", "list"],
    ["node", "qr", "n-1", "--png", "a.png", "--svg", "b.svg"], ["autostart", "maybe"],
    ["node", "logs", "n-1", "-n", "many"], ["node", "logs", "n-1", "-n", "-3"],
])
def test_usage_errors_exit_2(capsys, home, argv):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err


@pytest.mark.parametrize("argv", [
    ["node", "join", "INVITE-SECRET"], ["node", "join", "--invitation", "INVITE-SECRET"],
    ["node", "join", "--name", "x", "INVITE-SECRET"],
])
def test_join_never_takes_the_invitation_from_argv(capsys, home, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert "INVITE-SECRET" not in out


def test_version_names_the_version_then_the_build_commit(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert re.fullmatch(rf"cadre-desktop {re.escape(__version__)} \(commit ([0-9a-f]{{7,40}}(-dirty)?|unknown)\)",
                        out.strip())


def test_help_exits_0(capsys):
    code, out, _ = run(capsys, "node", "--help")
    assert code == 0 and "watch" in out


def test_paths_human_and_json(capsys, home):
    code, out, _ = run(capsys, "paths", "--json")
    assert code == 0 and json.loads(out) == resolve_paths().as_dict()
    assert json.loads(out)["control"] == str(home / "control.json")
    code, out, _ = run(capsys, "paths")
    fields = {k: v.strip() for k, v in (line.split(":", 1) for line in out.splitlines())}
    assert code == 0 and fields == resolve_paths().as_dict()


# -- finding the host -------------------------------------------------------------------------

def test_no_control_file_exits_3_saying_how_to_start_one(capsys, home):
    code, _, err = run(capsys, "node", "list")
    assert code == 3
    assert err.startswith("cadre-desktop: ") and err.count("\n") == 1
    assert "cadre-desktop --headless" in err


def test_dead_pid_in_control_file_exits_3(capsys, home):
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(done.stdout)
    (home / "control.json").write_text(json.dumps({"url": "http://127.0.0.1:9", "token": "t", "pid": dead}))
    code, _, err = run(capsys, "node", "list")
    assert code == 3 and str(dead) in err


def test_refused_connection_exits_3(capsys, home):
    served = ServedHost(home)
    url, token = served.server.url, served.server.token
    served.close()
    (home / "control.json").write_text(json.dumps({"url": url, "token": token, "pid": os.getpid()}))
    code, _, err = run(capsys, "node", "show", "n-1")
    assert code == 3 and "no host is answering" in err


def test_proxy_settings_are_ignored(capsys, served, monkeypatch):
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert run(capsys, "node", "list")[0] == 0


# -- node commands ------------------------------------------------------------------------------

def test_list_json_is_the_apis_node_objects(capsys, served):
    view = served.put(make_view("n-1", "kitchen"))
    code, out, _ = run(capsys, "node", "list", "--json")
    assert code == 0
    assert json.loads(out) == {"nodes": [view.to_json()]}
    for key in ("id", "name", "status", "running", "pid", "api_port", "peer_id", "cadre", "attempts",
                "next_retry_at", "last_error", "claim_url"):
        assert key in json.loads(out)["nodes"][0]


def test_list_table_shows_status_but_never_the_claim_url(capsys, served):
    view = served.put(make_view("n-1", "kitchen"))
    served.put(make_view("n-2", "attic", "error", running=False, ready=False, pid=None, attempts=5,
                         last_error="exited with code 3"))
    code, out, _ = run(capsys, "node", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["NAME", "ID", "STATUS", "RUNNING"]
    assert "kitchen" in lines[1] and "unclaimed" in lines[1] and "yes (4242)" in lines[1]
    assert "attic" in lines[2] and "error" in lines[2] and "exited with code 3" in lines[2]
    assert view.claim_url not in out and "secret-of" not in out


def test_list_with_no_nodes_says_how_to_add(capsys, served):
    code, out, _ = run(capsys, "node", "list")
    assert code == 0 and "node add" in out


def test_show_prints_key_values_with_the_claim_url(capsys, served):
    view = served.put(make_view("n-1", "kitchen"))
    code, out, _ = run(capsys, "node", "show", "n-1")
    assert code == 0
    fields = dict(line.split(":", 1) for line in out.splitlines())
    assert fields["status"].strip() == "unclaimed"
    assert fields["claim_url"].strip() == view.claim_url
    code, out, _ = run(capsys, "node", "show", "n-1", "--json")
    assert json.loads(out) == view.to_json()


def test_unknown_node_exits_1_with_the_apis_message(capsys, served):
    code, out, err = run(capsys, "node", "show", "ghost")
    assert code == 1 and out == ""
    assert err.startswith("cadre-desktop: ") and "ghost" in err and err.count("\n") == 1


def test_add_with_name(capsys, served):
    code, out, _ = run(capsys, "node", "add", "--name", "kitchen", "--json")
    assert code == 0
    node = json.loads(out)
    assert node["name"] == "kitchen" and node["status"] == "unclaimed" and node["claim_url"]
    assert served.host.calls == [("add", "kitchen")]
    code, out, _ = run(capsys, "node", "add")
    assert code == 0 and "Added" in out and "node qr" in out and "secret-of" not in out


def test_add_name_rejected_by_the_api_exits_1(capsys, served):
    code, _, err = run(capsys, "node", "add", "--name", "x" * 65)
    assert code == 1 and "name" in err


def test_join_reads_the_invitation_from_stdin(capsys, served, no_tty_stdin):
    no_tty_stdin("INVITE-SECRET-1\n")
    code, out, _ = run(capsys, "node", "join", "--name", "j", "--json")
    assert code == 0 and json.loads(out)["status"] == "joining"
    assert served.host.calls == [("join", "INVITE-SECRET-1", "j")]
    assert "INVITE-SECRET-1" not in out


def test_join_prompts_hidden_on_a_terminal(capsys, served, monkeypatch):
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(isatty=lambda: True))
    monkeypatch.setattr(cli.getpass, "getpass", lambda prompt: "INVITE-SECRET-2")
    code, out, _ = run(capsys, "node", "join")
    assert code == 0 and "Joining" in out
    assert served.host.calls == [("join", "INVITE-SECRET-2", None)]


def test_join_with_empty_stdin_exits_1(capsys, served, no_tty_stdin):
    code, _, err = run(capsys, "node", "join")
    assert code == 1 and "no invitation" in err
    assert served.host.calls == []


def test_join_without_host_exits_3_before_reading_stdin(capsys, home, no_tty_stdin):
    assert run(capsys, "node", "join")[0] == 3


@pytest.mark.parametrize("action", ["retry", "restart", "regenerate"])
def test_actions(capsys, served, action):
    served.put(make_view("n-1", "kitchen", "error" if action == "retry" else "unclaimed"))
    code, out, _ = run(capsys, "node", action, "n-1", "--json")
    assert code == 0 and json.loads(out)["id"] == "n-1"
    assert served.host.calls == [(action, "n-1")]


def test_retry_of_a_running_node_is_a_one_line_failure(capsys, served):
    served.put(make_view("n-1", "kitchen", "joined"))
    code, _, err = run(capsys, "node", "retry", "n-1")
    assert code == 1
    assert err == "cadre-desktop: Node n-1 is joined; only a node in error can be retried.\n"


# -- remove ------------------------------------------------------------------------------------

def test_remove_without_yes_and_no_terminal_exits_2(capsys, served, no_tty_stdin):
    served.put(make_view("n-1", "kitchen"))
    code, _, err = run(capsys, "node", "remove", "n-1")
    assert code == 2 and "--yes" in err
    assert "n-1" in served.host.nodes


def test_remove_with_yes_and_twice(capsys, served, no_tty_stdin):
    served.put(make_view("n-1", "kitchen"))
    code, out, _ = run(capsys, "node", "remove", "n-1", "--yes")
    assert code == 0 and "Removed n-1" in out and "n-1" not in served.host.nodes
    code, out, _ = run(capsys, "node", "remove", "n-1", "--yes")
    assert code == 0 and "nothing to remove" in out


@pytest.mark.parametrize("answer,removed", [("y", True), ("", False)])
def test_remove_asks_on_a_terminal(capsys, served, monkeypatch, answer, removed):
    served.put(make_view("n-1", "kitchen"))
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(isatty=lambda: True))
    asked = []

    def ask(q):
        asked.append(q)
        return answer
    monkeypatch.setattr("builtins.input", ask)
    code, _, _ = run(capsys, "node", "remove", "n-1")
    assert "kitchen" in asked[0]
    assert code == (0 if removed else 1)
    assert ("n-1" not in served.host.nodes) is removed


@pytest.mark.parametrize("answer,reclaimed", [("y", True), ("", False)])
def test_remove_of_an_orphans_id_on_a_terminal_asks_then_deletes_its_data(capsys, served, monkeypatch, answer,
                                                                           reclaimed):
    """Seed 000's "Run `node remove <id>`": on a terminal an id no record names was answered
    "nothing to remove" before the host was asked, so its orphan ran on (issue 39, item 18)."""
    served.host.orphans["n-9"] = [4321]
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(isatty=lambda: True))
    asked = []

    def ask(q):
        asked.append(q)
        return answer
    monkeypatch.setattr("builtins.input", ask)
    code, out, _ = run(capsys, "node", "remove", "n-9")
    assert asked and "n-9" in asked[0] and "delete its work folder" in asked[0]
    assert code == (0 if reclaimed else 1)
    assert (("reclaim", "n-9") in served.host.calls) is reclaimed
    if reclaimed:
        assert "pid 4321" in out and "work folder, log and secrets deleted" in out


# -- qr ----------------------------------------------------------------------------------------

def zbar_decode(path: Path) -> str:
    done = subprocess.run(["zbarimg", "--quiet", "--raw", str(path)], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(shutil.which("zbarimg") is None, reason="zbar-tools not installed")
def test_qr_png_decodes_to_the_claim_url(capsys, served, tmp_path):
    view = served.put(make_view("n-1", "kitchen"))
    target = tmp_path / "claim.png"
    code, out, _ = run(capsys, "node", "qr", "n-1", "--png", str(target))
    assert code == 0 and str(target) in out
    assert view.claim_url not in out
    assert zbar_decode(target) == view.claim_url
    if os.name == "posix":
        assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_qr_svg_is_written_private(capsys, served, tmp_path):
    served.put(make_view("n-1", "kitchen"))
    target = tmp_path / "claim.svg"
    assert run(capsys, "node", "qr", "n-1", "--svg", str(target))[0] == 0
    assert target.read_text().lstrip().startswith("<?xml")
    if os.name == "posix":
        assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_qr_in_the_terminal_prints_the_code_and_url(capsys, served):
    view = served.put(make_view("n-1", "kitchen"))
    code, out, _ = run(capsys, "node", "qr", "n-1")
    assert code == 0
    assert "█" in out and view.claim_url in out


def test_qr_of_a_claimed_node_exits_1(capsys, served, tmp_path):
    served.put(make_view("n-1", "kitchen", "joined"))
    code, _, err = run(capsys, "node", "qr", "n-1", "--png", str(tmp_path / "x.png"))
    assert code == 1 and "only an unclaimed node" in err
    assert not (tmp_path / "x.png").exists()


# -- logs ------------------------------------------------------------------------------------------

def test_logs_prints_the_last_lines_without_a_host(capsys, home):
    log = resolve_paths().node_log("n-1")
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"line {i}\n" for i in range(1000)))
    code, out, _ = run(capsys, "node", "logs", "n-1", "-n", "3")
    assert (code, out) == (0, "line 997\nline 998\nline 999\n")


def test_logs_of_a_node_without_log_exits_1(capsys, home):
    code, _, err = run(capsys, "node", "logs", "n-1")
    assert code == 1 and "no log" in err


def test_tail_lines_handles_short_files_and_no_final_newline(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"a\nb\nc")
    assert logtail.tail_lines(path, 2, block=2) == (b"b\nc", 5)
    assert logtail.tail_lines(path, 10) == (b"a\nb\nc", 5)
    assert logtail.tail_lines(path, 0) == (b"", 5)


@pytest.mark.skipif(os.name != "posix", reason="SIGINT to a child is POSIX")
def test_logs_follow_prints_appended_lines_until_ctrl_c(home):
    log = resolve_paths().node_log("n-1")
    log.parent.mkdir(parents=True)
    log.write_text("old\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen([sys.executable, "-m", "cadre_desktop", "node", "logs", "n-1", "-f"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"old\n"
        with open(log, "a") as fh:
            fh.write("new\n")
        assert child.stdout.readline() == b"new\n"
        log.write_text("after truncation\n")  # trimmed by the host: read from the start
        assert child.stdout.readline() == b"after truncation\n"
        child.send_signal(signal.SIGINT)
        assert child.wait(10) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# -- watch -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("as_json", [True, False])
def test_watch_prints_a_line_per_event_and_exits_3_when_the_host_stops(capsys, home, as_json):
    served = ServedHost(home)
    served.put(make_view("n-1", "kitchen"))
    result: dict[str, int] = {}
    argv = ["node", "watch"] + (["--json"] if as_json else [])
    watcher = threading.Thread(target=lambda: result.setdefault("code", cli.main(argv)))
    watcher.start()
    try:
        wait_until(lambda: served.server._streams, what="the watch stream")
        served.call(served.host.bus.emit, EventKind.CHANGED, "n-1", "")
        served.call(served.host.bus.emit, EventKind.REMOVED, "n-9", "")
    finally:
        served.close()
        watcher.join(10)
    out, err = capsys.readouterr()
    assert result["code"] == 3 and "stopped" in err
    if not as_json:
        first, second = out.splitlines()
        assert first.split()[1:] == ["changed", "kitchen", "(n-1)", "unclaimed"]
        assert second.split()[1:] == ["removed", "n-9"]
        assert "secret-of" not in out
        return
    events = [json.loads(line) for line in out.splitlines()]
    assert [(e["event"], e["id"]) for e in events] == [("changed", "n-1"), ("removed", "n-9")]
    assert events[0]["node"]["name"] == "kitchen" and events[1]["node"] is None


# -- host, gui, autostart ---------------------------------------------------------------------------

def test_no_arguments_start_the_tray_app(monkeypatch, home):
    seen = []

    def run_gui(argv):
        seen.append(argv)
        return 0
    monkeypatch.setattr("cadre_desktop.ui.app.run_gui", run_gui)
    assert cli.main([]) == 0 and seen == [[]]


def test_headless_runs_the_runner_with_paths_and_settings(monkeypatch, home):
    (home / "settings.json").write_text(json.dumps({"sweep_ms": 1234}))
    seen = []
    fake: Any = types.ModuleType("cadre_desktop.cli.headless")  # a stand-in: its one function is set below

    def run_headless(paths, settings):
        seen.append((paths, settings))
        return 7
    fake.run_headless = run_headless
    monkeypatch.setitem(sys.modules, "cadre_desktop.cli.headless", fake)
    assert cli.main(["--headless"]) == 7
    assert seen[0][0] == resolve_paths() and seen[0][1].sweep_ms == 1234


def test_the_two_starts_skip_the_commands_parser_and_client():
    """`cadre-desktop` and `--headless` go straight to cli/start.py: the tray loads no command
    module and no urllib client (about 1.3 MB of it, issue 26); commands still parse as before."""
    code = (
        "import sys\n"
        "import cadre_desktop.ui.app as app\n"
        "app.run_gui = lambda argv: 5\n"
        "from cadre_desktop import cli\n"
        "assert cli.main([]) == 5\n"
        "print(sorted(m for m in sys.modules if m.startswith('cadre_desktop.cli.') or m == 'urllib.request'))\n"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "['cadre_desktop.cli.start']"


def test_a_headless_start_with_bad_settings_says_so_in_one_line_through_the_entry_point(capsys, home):
    from cadre_desktop import cli as entry

    (home / "settings.json").write_text(json.dumps({"sweep_msec": 1}))
    assert entry.main(["--headless"]) == 1
    err = capsys.readouterr().err
    assert "sweep_msec" in err and err.startswith("cadre-desktop: ") and err.count("\n") == 1


def test_headless_with_bad_settings_exits_1_naming_the_key(capsys, home):
    (home / "settings.json").write_text(json.dumps({"sweep_msec": 1}))
    code, _, err = run(capsys, "--headless")
    assert code == 1 and "sweep_msec" in err and err.startswith("cadre-desktop: ")


def test_autostart_on_off_status_write_and_remove_the_xdg_entry(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    entry = tmp_path / "config" / "autostart" / "cadre-desktop.desktop"
    assert run(capsys, "autostart", "status")[1].strip() == "autostart is off"
    assert run(capsys, "autostart", "on")[0] == 0
    assert entry.is_file() and "Exec=" in entry.read_text()
    assert run(capsys, "autostart", "status")[1].strip() == "autostart is on"
    assert run(capsys, "autostart", "off")[0] == 0
    assert not entry.exists()


def test_autostart_calls_the_ui_module(capsys, monkeypatch):
    calls = []
    fake: Any = types.ModuleType("cadre_desktop.autostart")  # a stand-in: its functions are set below
    fake.enable, fake.disable, fake.status = (lambda: calls.append("on")), (lambda: calls.append("off")), (lambda: True)
    monkeypatch.setitem(sys.modules, "cadre_desktop.autostart", fake)
    monkeypatch.setattr("cadre_desktop.autostart", fake, raising=False)
    assert run(capsys, "autostart", "on")[0] == 0
    assert run(capsys, "autostart", "off")[0] == 0
    code, out, _ = run(capsys, "autostart", "status")
    assert calls == ["on", "off"] and (code, out.strip()) == (0, "autostart is on")


# -- hostile text never reaches the terminal as control sequences ------------------------------------

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[31mevil\u202e"


def no_controls(output: str) -> bool:
    return not any(c in output for c in "\x1b\x07\x9b\u202e")


@pytest.mark.parametrize("argv", [["node", "list"], ["node", "show", "n-1"], ["node", "list", "--json"],
                                  ["node", "show", "n-1", "--json"], ["node", "restart", "n-1"]])
def test_names_cadres_and_errors_from_the_network_are_escaped_in_every_output(capsys, served, argv):
    served.put(make_view("n-1", "kitchen " + HOSTILE, status="error", cadre=HOSTILE, last_error="x" + HOSTILE,
                         peer_id=HOSTILE))
    code, out, err = run(capsys, *argv)
    assert no_controls(out) and no_controls(err), (out, err)
    assert "\\x1b]0;pwned" in out or "\\u001b]0;pwned" in out or "\\x1b" in err


def test_watch_escapes_names_and_details(capsys, home):
    served = ServedHost(home)
    served.put(make_view("n-1", "name" + HOSTILE))
    result: dict[str, int] = {}
    watcher = threading.Thread(target=lambda: result.setdefault("code", cli.main(["node", "watch"])))
    watcher.start()
    try:
        wait_until(lambda: served.server._streams, what="the watch stream")
        served.call(served.host.bus.emit, EventKind.GAVE_UP, "n-1", "reason" + HOSTILE)
    finally:
        served.close()
        watcher.join(10)
    out, _ = capsys.readouterr()
    assert no_controls(out) and "name\\x1b]0;pwned" in out and "reason\\x1b" in out


def test_logs_escape_control_sequences_but_keep_lines(capsys, home):
    log = resolve_paths().node_log("n-1")
    log.parent.mkdir(parents=True)
    log.write_bytes(b'127.0.0.1 "GET /\x1b[2J\x07 HTTP/1.1" 404\nnext\tline\n')
    code, out, _ = run(capsys, "node", "logs", "n-1")
    assert code == 0 and no_controls(out)
    assert out == '127.0.0.1 "GET /\\x1b[2J\\x07 HTTP/1.1" 404\nnext\tline\n'


# -- pause and resume --------------------------------------------------------------------------

def test_pause_for_and_until_reach_the_host_as_milliseconds_and_rfc_3339(capsys, served):
    served.put(make_view("n-1", "kitchen", "joined"))
    code, out, _ = run(capsys, "node", "pause", "n-1", "--for", "30m")
    assert code == 0 and out.startswith("Sleeping: kitchen (n-1): sleeping until ")
    code, out, _ = run(capsys, "node", "pause", "n-1")
    assert code == 0 and out == "Paused: kitchen (n-1): paused\n"
    code, out, _ = run(capsys, "node", "resume", "n-1", "--json")
    assert code == 0 and json.loads(out)["status"] == "joined"
    calls = [c[:3] for c in served.host.calls]
    assert calls == [("pause", "n-1", 1_800_000), ("pause", "n-1", None), ("resume", "n-1")]


def test_until_a_clock_time_is_the_next_one_in_local_time():
    from datetime import datetime
    now = datetime(2026, 3, 1, 8, 0).astimezone()
    assert datetime.fromisoformat(cli.until_arg("07:00", now)) == (now.replace(hour=7) + __import__("datetime").timedelta(days=1))
    assert datetime.fromisoformat(cli.until_arg("09:30", now)) == now.replace(hour=9, minute=30)
    assert cli.until_arg("2026-03-02T07:00:00Z", now) == "2026-03-02T07:00:00+00:00"


def test_pause_with_a_bad_time_is_a_usage_error(capsys, served):
    served.put(make_view("n-1", "kitchen", "joined"))
    code, _, err = run(capsys, "node", "pause", "n-1", "--until", "half past seven")
    assert code == 2 and "not a time" in err
    assert served.host.calls == []


# -- every node at once: pause, resume, conditions --------------------------------------------

def test_pause_and_resume_every_node(capsys, served):
    code, out, _ = run(capsys, "pause", "--for", "30m")
    assert code == 0 and re.fullmatch(r"Every node is paused for (30|29) more minutes \(until \w{3} \d\d:\d\d\)\.\n", out)
    code, out, _ = run(capsys, "pause")
    assert code == 0 and out == "Every node is paused until you resume (cadre-desktop resume).\n"
    code, out, _ = run(capsys, "resume")
    assert code == 0 and out.startswith("Resumed: every node")
    assert [c[:2] for c in served.host.calls] == [("pause_all", 1_800_000), ("pause_all", None), ("resume_all",)]


def test_pause_until_a_time_in_the_past_is_one_clear_error(capsys, served):
    code, _, err = run(capsys, "pause", "--until", "2001-01-01T07:00:00Z")
    assert code == 1 and "in the past" in err and served.host.pause is None


def test_conditions_print_each_condition_and_the_verdict(capsys, served):
    from cadre_desktop.cli.when import conditions_text
    code, out, _ = run(capsys, "conditions")
    assert code == 0 and "Verdict: the nodes may run." in out and "Pause all: not paused." in out
    text = conditions_text({"conditions": [{"name": "on_battery", "sees": "on battery", "source": "UPower",
                                            "does": "holds the nodes"}],
                            "verdict": {"run": False, "reason": "on battery"}, "pending_s": 12.0,
                            "pause": {"paused": False}, "resumed": None})
    assert "on_battery" in text and "UPower" in text and "Verdict: the nodes are held (on battery)." in text
    assert "taken in 12 s" in text


def test_logs_of_a_node_with_no_log_here_are_asked_of_the_running_host_bounded_and_escaped(capsys, served, monkeypatch):
    served.put(make_view("n-1", "Attic"))
    hostile = [f"line {i}" for i in range(5000)] + ["\x1b]0;pwned\x07 last " + "x" * 10_000]
    monkeypatch.setattr(served.host, "log_tail", lambda node_id, lines=200: hostile[-lines:])
    code, out, _ = run(capsys, "node", "logs", "n-1", "-n", "2")
    assert code == 0
    shown = out.splitlines()
    assert shown[0] == "line 4999" and len(shown) == 2
    assert "\x1b" not in out and "\x07" not in out and shown[1].startswith("\\x1b]0;pwned\\x07 last ") and len(shown[1]) <= 2000
    code, out, _ = run(capsys, "node", "logs", "n-1", "-n", "100000")  # at most the API's 200 lines
    assert code == 0 and len(out.splitlines()) == 200


def test_fleet_join_without_the_address_says_where_to_find_it_and_needs_no_host(capsys, home):
    code, out, err = run(capsys, "fleet", "join", "7-ab3k-9qzp")
    assert code == 2 and "fleet invite" in err and "ADDRESS" in err
    assert "7-ab3k-9qzp" not in out + err
