"""scripts/_setup.sh says what it does, step by step, with progress (a first run took a
minute with two quiet lines). Run with stand-ins for dpkg-query, python3 and pip."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).parents[2]
FAKE_PYTHON = """#!/bin/sh
# python3 -m venv DIR makes DIR/bin/python, this same stand-in; pip install takes a while.
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; exit 0; fi
if [ "$3" = "install" ]; then sleep "${FAKE_PIP_S:-0}"; fi
exit 0
"""


def run_setup(tmp_path: Path, pip_s: str = "0") -> list[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("dpkg-query", "#!/bin/sh\necho 'install ok installed'\n"), ("python3", FAKE_PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    script = (f'source {REPO / "scripts" / "_setup.sh"}; STEPS=3; VENV={tmp_path / "venv"}; TICK_S=1; '
              "ensure_debs python3-venv libgl1; ensure_venv run; STEP=0; ensure_venv run")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_PIP_S": pip_s, "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def test_each_step_is_numbered_and_ends_with_its_time(tmp_path):
    lines = run_setup(tmp_path)
    steps = [line for line in lines if line.startswith("[")]
    assert steps[:3] == ["[1/3] system packages: all 2 present", "[2/3] creating the virtualenv .venv",
                         "[3/3] installing cadre-desktop and its Python packages (run) into .venv "
                         "(pip; a minute the first time)"]
    assert any(re.fullmatch(r"\s+done: pip install \(\d+ s\)", line) for line in lines)
    assert steps[3:] == ["[1/3] virtualenv .venv: present", "[2/3] Python packages (run): installed"]  # a second run


def test_a_long_step_says_it_is_still_at_work(tmp_path):
    lines = run_setup(tmp_path, pip_s="2.5")
    assert any(re.fullmatch(r"\s+still: pip install \([12] s\)", line) for line in lines), lines
