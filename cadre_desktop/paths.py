"""Where cadre-desktop keeps its files.

`CADRE_DESKTOP_HOME`, when set, is the one folder for everything (tests and
portable installs use it). Unset, the files go where the platform expects them:
platformdirs' user data folder for records and node work folders, its config
folder for settings, its log folder for logs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from cadre_desktop import APP_NAME

HOME_ENV = "CADRE_DESKTOP_HOME"


@dataclass(frozen=True)
class Paths:
    data_dir: Path
    config_dir: Path
    log_dir: Path

    @property
    def records_file(self) -> Path:
        return self.data_dir / "hosted-nodes.json"

    @property
    def state_file(self) -> Path:
        return self.data_dir / "state.json"

    @property
    def control_file(self) -> Path:
        return self.data_dir / "control.json"

    @property
    def grants_file(self) -> Path:
        return self.data_dir / "grants.json"

    @property
    def donations_file(self) -> Path:
        return self.data_dir / "donations.json"

    @property
    def lock_file(self) -> Path:
        return self.data_dir / "host.lock"

    @property
    def history_file(self) -> Path:
        """Each hosted node's history of states and restarts (host/core/ops/history.py)."""
        return self.data_dir / "node-history.json"

    @property
    def pause_file(self) -> Path:
        """Pause all, kept across a restart of the host (host/core/supervision/host_holds.py)."""
        return self.data_dir / "host-pause.json"

    @property
    def fleet_file(self) -> Path:
        """The paired computers of this computer's fleet (host/fleet/computers.py)."""
        return self.data_dir / "fleet.json"

    @property
    def etcd_dir(self) -> Path:
        """This computer's etcd member of the fleet: its data, log and certificates (host/fleetrun/)."""
        return self.data_dir / "etcd"

    @property
    def first_run_marker(self) -> Path:
        """Present: the next tray start opens its window with the welcome (then deletes it)."""
        return self.config_dir / "first_run"

    @property
    def settings_file(self) -> Path:
        return self.config_dir / "settings.json"

    @property
    def nodes_dir(self) -> Path:
        return self.data_dir / "nodes"

    def node_dir(self, node_id: str) -> Path:
        return self.nodes_dir / node_id

    def node_log(self, node_id: str) -> Path:
        return self.log_dir / f"node-{node_id}.log"

    @property
    def host_log(self) -> Path:
        return self.log_dir / "host.log"

    def as_dict(self) -> dict[str, str]:
        return {
            "data_dir": str(self.data_dir),
            "config_dir": str(self.config_dir),
            "log_dir": str(self.log_dir),
            "records": str(self.records_file),
            "state": str(self.state_file),
            "settings": str(self.settings_file),
            "control": str(self.control_file),
            "grants": str(self.grants_file),
            "donations": str(self.donations_file),
            "history": str(self.history_file),
            "pause": str(self.pause_file),
            "fleet": str(self.fleet_file),
            "etcd": str(self.etcd_dir),
            "nodes": str(self.nodes_dir),
        }


def resolve_paths(env: Mapping[str, str] | None = None) -> Paths:
    env = os.environ if env is None else env
    home = env.get(HOME_ENV)
    if home:
        root = Path(home).expanduser().absolute()
        return Paths(data_dir=root, config_dir=root, log_dir=root / "logs")
    return Paths(
        data_dir=Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)),
        config_dir=Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)),
        log_dir=Path(platformdirs.user_log_dir(APP_NAME, appauthor=False)),
    )
