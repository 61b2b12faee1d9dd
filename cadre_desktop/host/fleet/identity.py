"""This computer's identity in the fleet: an ECDSA P-256 key pair and a self-signed certificate.

The certificate is its own CA (each computer trusts exactly the certificates it pinned, nothing
else), public, and kept in `fleet.json`. The private key lives in the OS keyring only
(`<home id>/<computer id>/fleet-key`, through the host's `SecretStore`, off the event loop).
OpenSSL takes a key from a file only, so a TLS context gets it through memory: encrypted under a
random password that never leaves this process, in an anonymous memory file (`memfd_create`, Linux)
or, where there is none, in a 0600 temporary file removed the moment OpenSSL has read it.
Everything here imports `ssl` and `cryptography` inside the call: a computer in no fleet loads neither.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import secrets
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl


@dataclass(frozen=True)
class Identity:
    """This computer's id, certificate (public) and private key (PEM; memory only, never logged)."""

    computer_id: str
    cert: str
    key: str

    def __repr__(self) -> str:  # the key never in a log line or a traceback's locals
        return f"Identity({self.computer_id!r})"


def make_identity(computer_id: str) -> Identity:
    """A fresh key pair and its self-signed certificate (about 1 ms; call it off the loop)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, computer_id)])
    now = datetime.datetime.now(datetime.UTC)
    usage = x509.KeyUsage(digital_signature=True, key_cert_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          crl_sign=False, encipher_only=False, decipher_only=False)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=3650 * 3))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(usage, critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode("ascii")
    return Identity(computer_id, cert.public_bytes(serialization.Encoding.PEM).decode("ascii"), key_pem)


def _encrypted_key(identity: Identity, password: bytes) -> bytes:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(identity.key.encode("ascii"), None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.BestAvailableEncryption(password))


def load_into(ctx: ssl.SSLContext, identity: Identity, *, memfd: bool | None = None) -> None:
    """Give `ctx` this computer's certificate and key without the key in clear in any file."""
    password = secrets.token_hex(16).encode("ascii")
    data = identity.cert.encode("ascii") + _encrypted_key(identity, password)
    if memfd if memfd is not None else hasattr(os, "memfd_create"):
        fd = os.memfd_create("cadre-fleet", 0)
        try:
            os.write(fd, data)
            ctx.load_cert_chain(f"/proc/self/fd/{fd}", password=password)
        finally:
            os.close(fd)
        return
    fd, name = tempfile.mkstemp(prefix="cadre-fleet-")  # 0600; the key in it is encrypted all the same
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        ctx.load_cert_chain(name, password=password)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def server_context(identity: Identity, pinned: list[str]) -> ssl.SSLContext:
    """TLS 1.3 only; a client shows a pinned certificate, or none (which may only pair by a code)."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    load_into(ctx, identity)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    if pinned:
        ctx.load_verify_locations(cadata="\n".join(pinned))
    return ctx


def client_context(identity: Identity | None, target_cert: str | None) -> ssl.SSLContext:
    """TLS 1.3 only, trusting exactly `target_cert` (None: anyone, for the pairing exchange, which
    authenticates by the code instead), showing this computer's certificate when given."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False  # the pin is the name: a computer's address may change
    if target_cert is None:
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.load_verify_locations(cadata=target_cert)
    if identity is not None:
        load_into(ctx, identity)
    return ctx
