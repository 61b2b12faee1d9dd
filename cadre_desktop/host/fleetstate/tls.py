"""Peer and client TLS for the fleet's etcd, from each computer's own key.

There is no certificate authority. Each computer's pairing identity is a self-signed
certificate the others pin (issue 35); its member's certificate is a leaf that key signs
under that certificate's name (`certificate_for`), and the trust a member and a client are
given is the bundle of every pinned computer's certificate, its own among them
(`FleetTls.trusted_pem`). Each pinned certificate is its own anchor, so etcd (Go) and gRPC
(BoringSSL) accept exactly the fleet's computers, on the peer port and the client port alike
(`--client-cert-auth`, `--peer-client-cert-auth`).

The key is the caller's: today any P-256 or Ed25519 key (`cryptography`); once pairing
lands, the computer's pinned key, read from the keyring. It never reaches a file: the
client hands it to gRPC in memory, and the member reads it from an anonymous in-memory
file (`key_stream`: a Linux memfd given as the child's stdin, read by etcd as
`/proc/self/fd/0`, re-openable for every handshake). A platform without memfd refuses
(`TlsUnavailable`) rather than write the key to disk.

Every certificate names the same host, `FLEET_NAME`, besides the computer's addresses:
the client dials several members through one channel and checks that name, while the
members check each other's addresses.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from cadre_desktop.host.fleetstate.errors import TlsUnavailable

#: The host name every fleet certificate carries, and the one the client checks.
FLEET_NAME = "cadre-fleet.invalid"
#: How long a computer's certificate is valid: re-made at every start of the member anyway.
VALID_DAYS = 3650
#: The organisational unit of a member's certificate: its name differs from its issuer's.
MEMBER_ROLE = "etcd member"
#: Where the member finds its key: its stdin, which is the memfd (`key_stream`).
KEY_PATH = "/proc/self/fd/0"

if TYPE_CHECKING:  # cryptography loads where a certificate is made or read, never at import
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    PrivateKey: TypeAlias = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def _name(computer_id: str, role: str | None = None) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    parts = [x509.NameAttribute(NameOID.COMMON_NAME, computer_id)]
    if role:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role))
    return x509.Name(parts)


def _usage(*, ca: bool) -> Any:
    from cryptography import x509

    return x509.KeyUsage(digital_signature=True, key_cert_sign=ca, content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, crl_sign=False, encipher_only=False,
                         decipher_only=False)


def _signed(builder: Any, key: PrivateKey) -> bytes:
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return bytes(builder.sign(key, algorithm).public_bytes(serialization.Encoding.PEM))


def certificate_for(key: PrivateKey, computer_id: str, addresses: Sequence[str] = ("127.0.0.1",),
                    now: datetime.datetime | None = None) -> bytes:
    """The member's certificate (PEM), for server and client use: a leaf signed by `key` under the
    name of the computer's own self-signed certificate (the one the other computers pinned, or
    `anchor_for`'s), naming `FLEET_NAME`, `localhost` and each of `addresses`. A leaf, not a second
    self-signed certificate: TLS stacks (gRPC's BoringSSL among them) refuse a self-signed
    certificate that is not itself trusted, while a leaf chains to the pinned one by its issuer
    name and key."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = now or datetime.datetime.now(datetime.UTC)
    alt: list[x509.GeneralName] = [x509.DNSName(FLEET_NAME), x509.DNSName("localhost")]
    for address in addresses:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError:
            alt.append(x509.DNSName(address))
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(computer_id, MEMBER_ROLE)).issuer_name(_name(computer_id))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
    )
    return _signed(builder, key)


def anchor_for(key: PrivateKey, computer_id: str, now: datetime.datetime | None = None) -> bytes:
    """A computer's self-signed certificate as pairing makes it (`host/fleet/identity.py`): what
    the others pin and trust, and what `certificate_for`'s leaf chains to (for a store without
    pairing: a test's cluster, a benchmark's)."""
    from cryptography import x509

    now = now or datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(computer_id)).issuer_name(_name(computer_id))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(ca=True), critical=True)
    )
    return _signed(builder, key)


def public_key_pem(cert_pem: bytes) -> bytes:
    """The public key a certificate carries (for matching it against a pinned key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass(frozen=True)
class FleetTls:
    """What one computer needs for the fleet's etcd: its key (in memory only), its member's
    certificate, and the pinned certificates of every computer it trusts (its own among them)."""

    key_pem: bytes = field(repr=False)
    cert_pem: bytes
    trusted_pem: bytes

    @classmethod
    def of(cls, key: PrivateKey, cert_pem: bytes, pinned: Sequence[bytes]) -> FleetTls:
        from cryptography.hazmat.primitives import serialization

        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return cls(key_pem, cert_pem, b"".join(dict.fromkeys(pinned)))


def key_stream(key_pem: bytes, platform: str = sys.platform) -> int:
    """A descriptor of an anonymous in-memory file holding `key_pem`, for the member's stdin.

    Linux only (`os.memfd_create`): elsewhere `TlsUnavailable`, never a file on disk. The
    caller closes the descriptor once the member has started (the child keeps its copy)."""
    if not platform.startswith("linux") or not hasattr(os, "memfd_create"):
        raise TlsUnavailable("the fleet's etcd with TLS needs Linux here: its key is never written to a file,"
                             " and this system has no in-memory file to hand it over")
    fd = os.memfd_create("cadre-etcd-key", os.MFD_CLOEXEC)
    try:
        view = memoryview(key_pem)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
