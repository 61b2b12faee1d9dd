"""The one error tree of cadre-desktop, named by whose fault an error is.

Every error a person can see carries a stable snake_case `code` (for scripts and the
APIs) and a `message` written for a person: what went wrong and, where there is
something to do, what to do. Messages never contain a secret.

    CadreError                   the root: every exception of the package is under it
    ├── InputError               the person's (or a caller's) input: fix the request
    │   ├── Invalid              a value that cannot be used as given
    │   ├── NoSuchThing          an id nothing here has
    │   └── InvalidState         the thing exists, but its state does not allow this now
    ├── MachineError             the machine's state: files, keyring, ports, a busy host
    │   └── SettingsError, StorageError, SecretsError, PortsExhausted, SpawnError, HostBusy,
    │       OutOfDescriptors
    ├── NodeFault                how a node (or another host) behaved: it did not answer, refused
    ├── Bug                      our own mistake: a rule of the code broken (told as unexpected)
    └── ApiError                 not a fault but an answer on the wire: a status and a wire code,
                                 raised and read only at the HTTP edges and by their clients

The engine's errors carry no HTTP status: each HTTP edge maps them (host/edges/http_status.py
for the control API and the lend API's other errors, REFUSAL_STATUSES in host/edges/lend_api.py,
wire/http_status.py for the node's API). Wire codes are contracts: the control API speaks
these snake_case codes as they are; the node and lend APIs speak kebab-case, so their
edges write `wire_code(code)`. This module imports nothing of the package: the node
shares it with the host.
"""

from __future__ import annotations


class CadreError(Exception):
    """Base of every error cadre-desktop raises."""

    code: str = "error"

    def __init__(self, message: str, *, code: str | None = None, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        #: Seconds after which trying again may help (a busy node, a keyring not ready), if known.
        self.retry_after_s = retry_after_s


def message_of(error: BaseException) -> str:
    """What to say about `error`: the words written for a person, or Python's for anything else."""
    return error.message if isinstance(error, CadreError) else str(error)


def wire_code(code: str) -> str:
    """A code as the node and lend APIs write it (kebab-case, their contract)."""
    return code.replace("_", "-")


# -- the person's input -----------------------------------------------------------------------

class InputError(CadreError):
    """The request cannot be served as given; the message says what to change."""

    code = "invalid_input"


class Invalid(InputError):
    """A value (a name, an invitation, a request body) that cannot be used as given."""

    code = "bad_request"


class NoSuchThing(InputError):
    """An id (of a node, a grant, a lent node) that nothing here has (any more)."""

    code = "not_found"


class InvalidState(InputError):
    """The thing exists, but what it is now does not allow this (a retry of a running node)."""

    code = "conflict"


# -- the machine's state ----------------------------------------------------------------------

class MachineError(CadreError):
    """Something on this machine is in the way: a file, the keyring, the ports, another host."""

    code = "machine_error"


class SettingsError(MachineError):
    """settings.json is unreadable or holds a key or value we cannot use."""

    code = "settings_invalid"


class StorageError(MachineError):
    """A file could not be read or written; it is left as it was."""

    code = "storage_error"


class SecretsError(MachineError):
    """The OS keyring could not store or give back a secret."""

    code = "keyring_error"


class PortsExhausted(MachineError):
    code = "ports_exhausted"


class OutOfDescriptors(MachineError):
    """The host process has no file descriptor left (EMFILE/ENFILE): the whole machine's
    trouble, never one node's, and never a busy port. A node's start that meets it is
    not counted against the node."""

    code = "out_of_descriptors"


class SpawnError(MachineError):
    """The node program could not be started."""

    code = "spawn_failed"


class HostBusy(MachineError):
    """Another host already runs for this home."""

    code = "host_running"


# -- a node's behaviour -----------------------------------------------------------------------

class NodeFault(CadreError):
    """A node (or another host) did not answer, or answered in a way we cannot use."""

    code = "node_fault"


# -- our bug ----------------------------------------------------------------------------------

class Bug(CadreError):
    """A rule of our own code was broken: never the person's doing, always worth a report."""

    code = "internal_error"


# -- the wire ---------------------------------------------------------------------------------

class ApiError(CadreError):
    """An answer of one of our HTTP APIs: its status, its wire code (as the API writes it), a
    message, and any headers it must carry. Raised by the HTTP edges (guards, body checks,
    the node's refusals) and by the CLI's client when the host answers with an error."""

    def __init__(self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.headers = headers or {}

    def body(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}
