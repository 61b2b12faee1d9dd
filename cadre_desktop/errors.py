"""The one error root of cadre-desktop.

Every error a person can see carries a stable `code` (for the control API and
scripts) and a `message` written for a person: what went wrong and, where there
is something to do, what to do. Messages never contain a secret.
"""

from __future__ import annotations


class CadreError(Exception):
    """Base of every error cadre-desktop raises on purpose."""

    code: str = "error"
    #: HTTP status the control API answers with for this kind of error.
    http_status: int = 500

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def to_json(self) -> dict:
        return {"error": {"code": self.code, "message": self.message}}


class SettingsError(CadreError):
    """settings.json is unreadable or holds a key or value we cannot use."""

    code = "settings_invalid"
    http_status = 500


class StorageError(CadreError):
    """A file the host keeps could not be read or written; it is left as it was."""

    code = "storage_error"
    http_status = 500


class SecretsError(CadreError):
    """The OS keyring could not store or give back a secret."""

    code = "keyring_error"
    http_status = 503


class PortsExhausted(CadreError):
    code = "ports_exhausted"
    http_status = 503


class SpawnError(CadreError):
    """The node program could not be started."""

    code = "spawn_failed"
    http_status = 500


class NotFound(CadreError):
    code = "not_found"
    http_status = 404


class Conflict(CadreError):
    code = "conflict"
    http_status = 409


class BadRequest(CadreError):
    code = "bad_request"
    http_status = 400


class HostBusy(CadreError):
    """Another host already runs for this home."""

    code = "host_running"
    http_status = 409
