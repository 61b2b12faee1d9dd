"""How a node process ends: its exit codes, the one list both sides of the node contract read.

The node exits with them (node/errors.py: `exit_code_of`, node/lease.py), the host's supervisor
reads them (host/core/supervision/decide.py: which exits no respawn can help, which one is a
lease's end and not a crash). docs/node-contract.md's table is their meaning.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    INTERNAL = 1  # a bug: an unexpected exception escaped
    CONFIG = 2  # a missing or bad environment variable
    BIND = 3  # the API or P2P port could not be bound
    NODE_DIR = 4  # the work folder cannot be created, written or locked
    CORRUPT_FILE = 5  # the identity or state file is unreadable; left untouched
    LEASE_EXPIRED = 6  # started with a lease deadline (a fleet's failover node) that passed
