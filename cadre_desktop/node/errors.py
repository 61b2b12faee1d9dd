"""One error root for the node, and the exit codes the host reads.

Two kinds of failure exist. A *start-up* failure ends the process with an
:class:`ExitCode` and one line on stderr, so the host can tell a bad configuration
(do not respawn blindly) from a busy port (pick another) from a broken work folder
(tell the user). A *request* failure is an :class:`ApiError`: it becomes the JSON body
``{"error": {"code", "message"}}`` with its HTTP status, and the node keeps running.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """How the node process ended. Documented in docs/node-contract.md."""

    OK = 0
    INTERNAL = 1  # a bug: an unexpected exception escaped
    CONFIG = 2  # a missing or bad environment variable
    BIND = 3  # the API or P2P port could not be bound
    NODE_DIR = 4  # the work folder cannot be created, written or locked
    CORRUPT_FILE = 5  # the identity or state file is unreadable; left untouched


class NodeError(Exception):
    """Root of every error the node raises on purpose.

    ``code`` is stable and machine-readable; ``str(err)`` is a sentence for a person
    and never contains a secret.
    """

    code = "node-error"
    exit_code = ExitCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(NodeError):
    """The environment the node was started with is incomplete or wrong."""

    code = "config-error"
    exit_code = ExitCode.CONFIG


class BindError(NodeError):
    """A port the host assigned is taken or not bindable on the given address."""

    code = "bind-error"
    exit_code = ExitCode.BIND


class NodeDirError(NodeError):
    """The work folder cannot be used (not creatable, not writable, or locked)."""

    code = "node-dir-error"
    exit_code = ExitCode.NODE_DIR


class CorruptFileError(NodeError):
    """A file the node owns exists but cannot be understood.

    Never "repaired" by overwriting: the identity and the claim live there, and
    losing them silently would turn a claimed node into an unclaimed stranger.
    """

    code = "corrupt-file"
    exit_code = ExitCode.CORRUPT_FILE


class StorageError(NodeError):
    """Writing a state change failed; the change was not applied."""

    code = "storage-error"


class ApiError(NodeError):
    """A request the node refuses; rendered as ``{"error": {"code", "message"}}``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}
