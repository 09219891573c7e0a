"""A certificate authority and certificates for a Dask cluster that speaks TLS only.

``make_certificates`` writes, with the ``cryptography`` library, a CA and one
key pair per role (scheduler, worker, client) signed by it, their addresses
in the certificates' subject alternative names. Dask's TLS is mutual: every
side presents its certificate and checks the other's against the CA, so a
process without a certificate from this CA can neither join as a worker nor
connect as a client. ``client_environment`` gives the Dask configuration (as
environment variables) a client needs; a notebook then connects to the
``tls://`` address unchanged.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from edgelab.errors import ConfigError

ROLES = ("scheduler", "worker", "client")


@dataclass(frozen=True)
class Certificates:
    """Paths of the CA certificate and each role's certificate and key (PEM)."""

    folder: str

    @property
    def ca_file(self) -> str:
        """The CA's certificate: what every side checks the others against."""
        return str(Path(self.folder) / "ca.pem")

    def cert(self, role: str) -> str:
        """``role``'s certificate."""
        return str(Path(self.folder) / f"{role}.pem")

    def key(self, role: str) -> str:
        """``role``'s private key (mode 0600)."""
        return str(Path(self.folder) / f"{role}-key.pem")

    def dask_arguments(self, role: str) -> list[str]:
        """``dask scheduler`` / ``dask worker`` options for ``role``."""
        return ["--tls-ca-file", self.ca_file, "--tls-cert", self.cert(role), "--tls-key", self.key(role)]

    def client_environment(self) -> dict[str, str]:
        """Dask configuration for a client of this cluster, as environment variables."""
        return {
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": self.ca_file,
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": self.cert("client"),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": self.key("client"),
            "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
        }

    def security(self, role: str = "client") -> object:
        """A ``distributed.Security`` for ``role`` that requires encryption."""
        from distributed import Security

        return Security(
            tls_ca_file=self.ca_file,
            tls_client_cert=self.cert(role),
            tls_client_key=self.key(role),
            require_encryption=True,
        )


def make_certificates(
    folder: str | os.PathLike[str], addresses: list[str], *, name: str = "edgelab", days: int = 365
) -> Certificates:
    """Write a CA and a certificate per role (valid for ``addresses``) into ``folder``; return their paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ConfigError("days", days, "an integer >= 1")
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    for address in addresses:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError:
            names.append(x509.DNSName(address))
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )  # digital signature, certificate and CRL signing
        .sign(ca_key, hashes.SHA256())
    )
    certificates = Certificates(str(out))
    _write(Path(certificates.ca_file), ca.public_bytes(serialization.Encoding.PEM), 0o644)
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} {role}")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            # Dask's TLS is mutual: every process is a server to some and a client to others.
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        _write(Path(certificates.cert(role)), cert.public_bytes(serialization.Encoding.PEM), 0o644)
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        _write(Path(certificates.key(role)), private, 0o600)
    return certificates


def _write(path: Path, data: bytes, mode: int) -> None:
    # Created with its final mode, so a key is never readable by others, even for an instant.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
