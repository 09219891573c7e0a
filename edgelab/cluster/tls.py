"""A certificate authority and certificates for a Dask cluster that speaks TLS only.

``make_certificates`` writes, with the ``cryptography`` library, a CA and one
key pair per role (scheduler, worker, client) signed by it, their addresses
in the certificates' subject alternative names. Dask's TLS is mutual: every
side presents its certificate and checks the other's against the CA, so a
process without a certificate from this CA can neither join as a worker nor
connect as a client. ``client_environment`` gives the Dask configuration (as
environment variables) a client needs; a notebook then connects to the
``tls://`` address unchanged.

As a command, ``python -m edgelab.cluster.tls OUT_DIR ADDRESS [ADDRESS ...]`` writes
them for a cluster off this machine (``cluster/``: Raspberry Pis, compose,
Kubernetes) and prints which files go to which machine and what a client
exports. The CA's own key is never written: no one, this command included,
can sign another certificate for the cluster; another scheduler address needs
a new set (every worker shares the workers' certificate).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import ipaddress
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from edgelab.common import checks
from edgelab.common.errors import ConfigError

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

    checks.integer("days", days, at_least=1)
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
    """Write ``path`` whole, created afresh with ``mode``: never through a link someone left at its name.

    A new file of the folder's (``mkstemp``: exclusive, no link followed, 0600,
    so a key is never readable by others, even for an instant), renamed over
    the name: a symbolic link there is replaced, not written through, so
    whoever runs this (root, setting up shaped hosts) cannot be made to
    overwrite the file the link points at.
    """
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


#: A host name a certificate may carry: labels of letters, digits and hyphens, joined by dots (no scheme, no port).
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


def _address(text: str) -> str:
    """``text`` if it is an IP address or a host name, for argparse."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if not _HOST_NAME.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an IP address nor a host name (give 10.0.0.1 or scheduler, not tls://HOST:PORT)"
        )
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m edgelab.cluster.tls OUT_DIR ADDRESS ...``: a cluster's CA and certificates, and where they go."""
    parser = argparse.ArgumentParser(
        prog="python -m edgelab.cluster.tls",
        description="Write a CA and the scheduler's, workers' and client's certificates and keys (keys mode 0600) "
        "for a Dask cluster that speaks TLS only, then print which files go to which machine.",
    )
    parser.add_argument("out_dir", metavar="OUT_DIR", help="the folder to write ca.pem, ROLE.pem and ROLE-key.pem to")
    parser.add_argument(
        "addresses",
        metavar="ADDRESS",
        nargs="+",
        type=_address,
        help="the scheduler's addresses and names as workers and clients reach it (IP addresses or host names)",
    )
    parser.add_argument("--name", default="edgelab", help="the name in the certificates' subjects (default edgelab)")
    parser.add_argument("--days", type=int, default=365, help="how long the certificates are valid (default 365)")
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace a set already in OUT_DIR (its new CA no longer lets in the machines holding the old set)",
    )
    args = parser.parse_args(argv)
    if args.days < 1:
        parser.error(f"--days must be 1 or more, got {args.days}")
    out = Path(os.path.abspath(args.out_dir))  # absolute: the printed exports work from any folder
    if out.exists() and not out.is_dir():
        parser.error(f"{out} exists and is not a folder")
    if Path(Certificates(str(out)).ca_file).exists() and not args.force:
        parser.error(
            f"{out} already holds a CA (ca.pem): a new one would lock out every machine holding its certificates; "
            "--force replaces it"
        )
    try:
        made = make_certificates(out, list(args.addresses), name=args.name, days=args.days)
    except (ConfigError, OSError) as exc:
        print(f"python -m edgelab.cluster.tls: {exc}", file=sys.stderr)
        return 1

    def files(role: str) -> str:
        return " ".join(Path(p).name for p in (made.ca_file, made.cert(role), made.key(role)))

    def options(role: str) -> str:  # as copied to the machine's working folder: names, not this machine's paths
        return " ".join(Path(a).name if a.startswith(str(out)) else a for a in made.dask_arguments(role))

    exports = "\n".join(f"  export {k}={v}" for k, v in made.client_environment().items())
    print(
        f"edgelab.cluster.tls: a CA and certificates for {' '.join(args.addresses)} (valid {args.days} days) in {out}\n"
        f"to the scheduler's machine: {files('scheduler')}\n"
        f"  dask scheduler --protocol tls {options('scheduler')}\n"
        f"to every worker's machine: {files('worker')}\n"
        f"  dask worker tls://SCHEDULER:8786 {options('worker')}\n"
        "  (a Raspberry Pi: sudo cluster/pi/install-worker.sh --tls-dir FOLDER_OF_THESE ...)\n"
        f"the client, this machine: {files('client')}; for ./run.sh reproduce --scheduler tls://SCHEDULER:8786\n"
        f"{exports}\n"
        "Each *-key.pem is its machine's secret (mode 0600 here): copy it to that machine only.\n"
        "Every worker takes the same worker pair. The CA's own key was not kept: for another scheduler address,\n"
        "or if a key may have leaked, make a new set (--force) and hand it out again."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
