"""The node's errors, on the package's one tree (cadre_desktop/errors.py), and the exit codes the host reads.

Two kinds of failure exist. A *start-up* failure ends the process with an
:class:`ExitCode` and one line on stderr, so the host can tell a bad configuration
(do not respawn blindly) from a busy port (pick another) from a broken work folder
(tell the user): `exit_code_of` is that mapping, the process's edge, as the HTTP
statuses are the API's. A *request* failure is a :class:`RequestRefused` (a reason,
no status): wire/http_status.py turns it into the answer ``{"error": {"code",
"message"}}`` with its HTTP status, and the node keeps running. A failed write of the
state is the package's :class:`StorageError`.
"""

from __future__ import annotations

from cadre_desktop.errors import CadreError, InputError, MachineError, StorageError
from cadre_desktop.wire.exits import ExitCode
from cadre_desktop.wire.refusal import RequestRefused

#: StorageError (a failed write of the state) is the package's one, ExitCode and RequestRefused the wire's;
#: named here for the node's modules.
__all__ = ["BindError", "ConfigError", "CorruptFileError", "ExitCode", "NodeDirError", "RequestRefused",
           "StorageError", "exit_code_of"]


class ConfigError(InputError):
    """The environment the node was started with is incomplete or wrong."""

    code = "config_error"


class BindError(MachineError):
    """A port the host assigned is taken or not bindable on the given address."""

    code = "bind_error"


class NodeDirError(MachineError):
    """The work folder cannot be used (not creatable, not writable, or locked)."""

    code = "node_dir_error"


class CorruptFileError(MachineError):
    """A file the node owns exists but cannot be understood.

    Never "repaired" by overwriting: the identity and the claim live there, and
    losing them silently would turn a claimed node into an unclaimed stranger.
    """

    code = "corrupt_file"


#: The exit code of each error that ends the node at start-up; any other error is INTERNAL.
EXIT_CODES: dict[type[CadreError], ExitCode] = {
    ConfigError: ExitCode.CONFIG,
    BindError: ExitCode.BIND,
    NodeDirError: ExitCode.NODE_DIR,
    CorruptFileError: ExitCode.CORRUPT_FILE,
}


def exit_code_of(error: CadreError) -> ExitCode:
    for kind in type(error).__mro__:
        if kind in EXIT_CODES:
            return EXIT_CODES[kind]
    return ExitCode.INTERNAL
