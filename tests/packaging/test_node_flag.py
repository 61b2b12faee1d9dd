"""`cadre-desktop --node` runs the reference node: how a bundle, which has no `python -m`, starts its nodes."""

from __future__ import annotations

import subprocess
import sys

from cadre_desktop import __version__


def cadre_desktop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cadre_desktop", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)


def test_node_flag_runs_the_reference_node():
    done = cadre_desktop("--node", "--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"cadre-node {__version__}")


def test_node_flag_passes_its_arguments_to_the_node_not_to_the_app():
    done = cadre_desktop("--node", "--headless")
    assert done.returncode == 2 and "cadre-node: error: unexpected arguments" in done.stderr


def test_node_flag_counts_only_as_the_first_argument():
    done = cadre_desktop("doctor", "--node")
    assert done.returncode == 2 and "unrecognized arguments: --node" in done.stderr
