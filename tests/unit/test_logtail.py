"""The one reader of a log's end (logtail), as the CLI, the host's NodeLogs and doctor use it."""

from cadre_desktop.host.local.nodelogs import HEADER_PREFIX, NodeLogs
from cadre_desktop.logs import logtail
from cadre_desktop.paths import Paths


def test_a_bounded_read_leaves_out_the_line_the_bound_cuts(tmp_path):
    path = tmp_path / "n.log"
    path.write_bytes(b"first line that is long\nsecond\nthird\n")
    assert logtail.tail_lines(path, 10, max_bytes=20) == (b"second\nthird\n", 37)
    assert logtail.tail_lines(path, 10) == (b"first line that is long\nsecond\nthird\n", 37)


def test_skipped_lines_are_neither_shown_nor_counted(tmp_path):
    path = tmp_path / "n.log"
    path.write_bytes(b"a\nb\n--- cadre-desktop: starting ---\nc\n")
    assert logtail.tail_lines(path, 2, block=3, skip=b"--- cadre-desktop:")[0] == b"b\nc\n"
    assert logtail.last_lines(path, 5, max_bytes=1024, skip="--- cadre-desktop:") == ["a", "b", "c"]


def test_a_missing_log_has_no_last_lines(tmp_path):
    assert logtail.last_lines(tmp_path / "none.log", 3, max_bytes=1024) == []


def test_node_logs_live_where_paths_say_and_their_tail_drops_the_hosts_headers(tmp_path):
    paths = Paths(tmp_path, tmp_path, tmp_path / "logs")
    logs = NodeLogs(paths, cap=64)
    assert logs.path("n1") == paths.node_log("n1")
    paths.log_dir.mkdir()
    paths.node_log("n1").write_text(f"{HEADER_PREFIX} starting node n1 ---\nready\n")
    assert logs.tail("n1", 5, max_bytes=4096) == ["ready"]
    paths.node_log("n1").write_text("x" * 100 + "\n")
    logs.trim("n1")
    assert paths.node_log("n1").stat().st_size == 0 and (paths.log_dir / "node-n1.log.1").stat().st_size == 101
    logs.delete("n1")
    assert not list(paths.log_dir.iterdir())
