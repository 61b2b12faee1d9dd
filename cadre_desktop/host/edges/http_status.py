"""The HTTP status each error of the tree answers with, at the host's HTTP edges.

The engine raises errors that say what went wrong and whose fault it is
(cadre_desktop/errors.py); only the control API (host/edges/control.py, host/edges/lend_control.py)
and the lend API (host/edges/lend_api.py) turn them into a status, through this one table.
The closest class in an error's ancestry that the table names decides; anything else is
the server's failure, 500.
"""

from __future__ import annotations

from cadre_desktop.errors import ApiError, CadreError, HostBusy, Invalid, InvalidState, NoSuchThing, PortsExhausted, SecretsError

#: Statuses of the control API's JSON error bodies (a contract: docs, CLI and scripts read them).
STATUSES: dict[type[CadreError], int] = {
    Invalid: 400,
    NoSuchThing: 404,
    InvalidState: 409,
    HostBusy: 409,
    SecretsError: 503,
    PortsExhausted: 503,
}


def status_of(error: CadreError) -> int:
    if isinstance(error, ApiError):
        return error.status
    for kind in type(error).__mro__:
        if kind in STATUSES:
            return STATUSES[kind]
    return 500
