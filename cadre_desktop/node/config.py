"""The node's configuration, read from its environment and nowhere else.

Secrets (the claim secret, the invitation, a donated node's seed token) come
only from the environment: a
command line is visible to every user of the machine through the process table.
Every problem is reported as a :class:`ConfigError` naming the variable, and the
message never repeats the value of a secret variable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cadre_desktop.errors import Invalid
from cadre_desktop.node.cadre.donated import DonatedConfig, load_donated
from cadre_desktop.node.errors import ConfigError
from cadre_desktop.text import is_host
from cadre_desktop.wire.lease import LeaseTerms, terms_from_env

NODE_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MIN_SECRET_CHARS = 16
MAX_SECRET_CHARS = 512
MAX_NAME_CHARS = 64


@dataclass(frozen=True)
class Tuning:
    """Optional, non-secret knobs; each has a documented default."""

    join_timeout_s: float = 60.0
    claim_max_failures: int = 5
    claim_lockout_s: float = 60.0
    body_timeout_s: float = 10.0
    log_level: str = "INFO"


@dataclass(frozen=True)
class NodeConfig:
    node_id: str
    node_dir: Path
    api_host: str
    api_port: int
    p2p_port: int
    advertise_host: str
    claim_secret: str | None
    invitation: str | None
    tuning: Tuning = Tuning()
    #: Set when the node was lent to another party (CADRE_DONATION_ID and friends).
    donated: DonatedConfig | None = None
    #: The name the person gave the node (shown on the claim page); not a secret.
    node_name: str | None = None
    #: The host's own credential for the owner endpoints, accepted from loopback only.
    host_token: str | None = None
    #: A fleet's failover node: its generation and lease deadline (wire/lease.py), else None.
    lease: LeaseTerms | None = None

    @property
    def mode(self) -> str:
        if self.donated is not None:
            return "donated"
        return "invitation" if self.invitation else "claim"

    def __repr__(self) -> str:  # never let a secret reach a log through repr()
        return (
            f"NodeConfig(node_id={self.node_id!r}, node_dir={str(self.node_dir)!r}, "
            f"api={self.api_host}:{self.api_port}, p2p_port={self.p2p_port}, "
            f"advertise_host={self.advertise_host!r}, node_name={self.node_name!r}, "
            f"mode={self.mode}, host_token={'set' if self.host_token else 'unset'})"
        )

    __str__ = __repr__


def load_config(env: Mapping[str, str]) -> NodeConfig:
    """Build the configuration from ``env`` (normally ``os.environ``)."""
    node_id = _required(env, "CADRE_NODE_ID")
    if not NODE_ID_PATTERN.fullmatch(node_id):
        raise ConfigError(
            "CADRE_NODE_ID must be 1-64 characters of letters, digits, '.', '_' or '-',"
            f" starting with a letter or digit (got {node_id!r})"
        )
    node_dir = Path(_required(env, "CADRE_NODE_DIR"))
    api_host = _host(env, "CADRE_API_HOST")
    api_port = _port(env, "CADRE_API_PORT")
    p2p_port = _port(env, "CADRE_P2P_PORT")
    if api_port == p2p_port:
        raise ConfigError(
            f"CADRE_API_PORT and CADRE_P2P_PORT must differ (both are {api_port})"
        )
    advertise_host = _host(env, "CADRE_ADVERTISE_HOST")

    claim_secret = env.get("CADRE_CLAIM_SECRET") or None
    invitation = (env.get("CADRE_INVITATION") or "").strip() or None
    donated = load_donated(env, _check_secret)
    given = [name for name, value in (("CADRE_CLAIM_SECRET", claim_secret),
                                      ("CADRE_INVITATION", invitation),
                                      ("CADRE_DONATION_ID", donated)) if value]
    if len(given) > 1:
        raise ConfigError(
            "set exactly one of CADRE_CLAIM_SECRET, CADRE_INVITATION or CADRE_DONATION_ID,"
            f" not {' and '.join(given)}"
        )
    if not given:
        raise ConfigError("set one of CADRE_CLAIM_SECRET, CADRE_INVITATION or CADRE_DONATION_ID")
    if claim_secret is not None:
        _check_secret("CADRE_CLAIM_SECRET", claim_secret)
    host_token = env.get("CADRE_HOST_TOKEN") or None
    if host_token is not None:
        _check_secret("CADRE_HOST_TOKEN", host_token)
    # An invitation's content is checked by the node itself, not here: a malformed
    # one is reported through /status ("failed" with a reason) so the host and the
    # user can read why, rather than as a crash loop.

    return NodeConfig(
        node_id=node_id,
        node_dir=node_dir,
        api_host=api_host,
        api_port=api_port,
        p2p_port=p2p_port,
        advertise_host=advertise_host,
        claim_secret=claim_secret,
        invitation=invitation,
        tuning=_tuning(env),
        donated=donated,
        node_name=_name(env),
        host_token=host_token,
        lease=_lease(env),
    )


def _lease(env: Mapping[str, str]) -> LeaseTerms | None:
    try:
        return terms_from_env(env)
    except Invalid as err:
        raise ConfigError(err.message) from None


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigError(f"{name} is not set")
    return value


def _host(env: Mapping[str, str], name: str) -> str:
    value = _required(env, name)
    if not is_host(value):
        raise ConfigError(f"{name} must be an IP address or a host name (got {value!r})")
    return value


def _port(env: Mapping[str, str], name: str) -> int:
    value = _required(env, name)
    if not _is_decimal(value) or not 1 <= int(value) <= 65535:
        raise ConfigError(f"{name} must be a port number from 1 to 65535 (got {value!r})")
    return int(value)


def _is_decimal(value: str) -> bool:
    return value.isascii() and value.isdigit() and len(value) <= 10


def _check_secret(name: str, secret: str) -> None:
    # The value is never echoed: a message naming the variable is enough.
    if not MIN_SECRET_CHARS <= len(secret) <= MAX_SECRET_CHARS:
        raise ConfigError(
            f"{name} must be {MIN_SECRET_CHARS} to {MAX_SECRET_CHARS} characters long"
        )
    if not secret.isprintable() or any(ch.isspace() for ch in secret):
        raise ConfigError(f"{name} must be printable, without spaces")


def _name(env: Mapping[str, str]) -> str | None:
    value = env.get("CADRE_NODE_NAME", "").strip()
    if not value:
        return None
    if len(value) > MAX_NAME_CHARS or not value.isprintable():
        raise ConfigError(
            f"CADRE_NODE_NAME must be 1-{MAX_NAME_CHARS} printable characters on one line"
        )
    return value


def _tuning(env: Mapping[str, str]) -> Tuning:
    defaults = Tuning()
    log_level = env.get("CADRE_LOG_LEVEL", "").strip().upper() or defaults.log_level
    if log_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(
            f"CADRE_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR (got {log_level!r})"
        )
    return Tuning(
        join_timeout_s=_optional_int(
            env, "CADRE_JOIN_TIMEOUT_MS", defaults.join_timeout_s * 1000, 100, 3_600_000
        )
        / 1000,
        claim_max_failures=_optional_int(
            env, "CADRE_CLAIM_MAX_FAILURES", defaults.claim_max_failures, 1, 1000
        ),
        claim_lockout_s=_optional_int(
            env, "CADRE_CLAIM_LOCKOUT_MS", defaults.claim_lockout_s * 1000, 100, 86_400_000
        )
        / 1000,
        body_timeout_s=_optional_int(
            env, "CADRE_BODY_TIMEOUT_MS", defaults.body_timeout_s * 1000, 100, 600_000
        )
        / 1000,
        log_level=log_level,
    )


def _optional_int(
    env: Mapping[str, str], name: str, default: float, low: int, high: int
) -> int:
    value = env.get(name, "").strip()
    if not value:
        return int(default)
    if not _is_decimal(value) or not low <= int(value) <= high:
        raise ConfigError(f"{name} must be an integer from {low} to {high} (got {value!r})")
    return int(value)
