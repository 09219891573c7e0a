"""The cluster's certificates: written privately, never through a link at a key's name, only the CA's let in."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography import x509

from edgelab.cluster.tls import ROLES, Certificates, main, make_certificates


def test_keys_are_private_and_certificates_readable(tmp_path: Path) -> None:
    made = make_certificates(tmp_path, ["127.0.0.1"])

    assert Path(made.key("worker")).stat().st_mode & 0o777 == 0o600
    assert Path(made.cert("worker")).stat().st_mode & 0o777 == 0o644
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_a_link_left_at_a_keys_name_is_replaced_not_written_through(tmp_path: Path) -> None:
    # Prepare: someone left links where the keys go, pointing at a file of theirs (as root would overwrite it)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    folder = tmp_path / "tls"
    folder.mkdir()
    for role in ("scheduler", "worker", "client"):
        (folder / f"{role}-key.pem").symlink_to(victim)
    (folder / "ca.pem").symlink_to(victim)

    # Execute
    made = make_certificates(folder, ["127.0.0.1"])

    # Assert: the victim is untouched; each name is now a regular file of ours
    assert victim.read_text() == "precious\n"
    for path in (made.key("worker"), made.key("client"), made.ca_file):
        assert not Path(path).is_symlink() and Path(path).is_file()
    assert "PRIVATE KEY" in Path(made.key("worker")).read_text()


def test_a_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    # Prepare: a server holding the cluster's certificate, requiring a client certificate from the same CA
    ours = make_certificates(tmp_path / "ours", ["127.0.0.1"])
    theirs = make_certificates(tmp_path / "theirs", ["127.0.0.1"])
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ours.ca_file)
    server_context.load_cert_chain(ours.cert("worker"), ours.key("worker"))
    server_context.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    outcomes: list[str] = []

    def serve() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            try:
                with server_context.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"in")
                    outcomes.append("accepted")
            except (ssl.SSLError, OSError):
                outcomes.append("refused")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def client(certificates: object) -> bytes:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ours.ca_file)
        context.check_hostname = False
        context.load_cert_chain(certificates.cert("client"), certificates.key("client"))  # type: ignore[attr-defined]
        with (
            socket.create_connection(listener.getsockname(), timeout=10) as raw,
            context.wrap_socket(raw) as tls,
        ):
            return tls.recv(2)

    # Execute / Assert: a stranger's certificate gets nothing; the cluster's own gets in
    with pytest.raises((ssl.SSLError, OSError)):
        assert client(theirs) != b"in"
    assert client(ours) == b"in"
    thread.join(10)
    listener.close()
    assert outcomes == ["refused", "accepted"]


def test_the_command_writes_a_set_and_says_which_file_goes_where(tmp_path: Path) -> None:
    # Execute: as the cluster's README has it, from another folder
    done = subprocess.run(
        [sys.executable, "-m", "edgelab.cluster.tls", "tls", "127.0.0.1", "scheduler"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    made = Certificates(str(tmp_path / "tls"))
    lines = done.stdout.splitlines()

    # Assert: every role's certificate and private key, valid for the addresses given
    assert done.returncode == 0, done.stderr
    for role in ROLES:
        assert Path(made.key(role)).stat().st_mode & 0o777 == 0o600
        assert Path(made.cert(role)).stat().st_mode & 0o777 == 0o644
    cert = x509.load_pem_x509_certificate(Path(made.cert("scheduler")).read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    assert "scheduler" in names.get_values_for_type(x509.DNSName)
    # Which files go to which machine, and the client's variables with absolute paths
    assert "to the scheduler's machine: ca.pem scheduler.pem scheduler-key.pem" in lines
    assert "to every worker's machine: ca.pem worker.pem worker-key.pem" in lines
    for variable, value in made.client_environment().items():
        assert f"  export {variable}={value}" in lines
    assert Path(made.key("client")).is_absolute()


def test_the_command_keeps_a_ca_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Prepare
    assert main([str(tmp_path), "10.0.0.1"]) == 0
    ca = Path(Certificates(str(tmp_path)).ca_file)
    first = ca.read_bytes()

    # Execute, Assert: a second set would lock out the machines holding the first, so only --force makes one
    with pytest.raises(SystemExit) as refused:
        main([str(tmp_path), "10.0.0.1"])
    assert refused.value.code == 2
    assert "already holds a CA" in capsys.readouterr().err
    assert ca.read_bytes() == first
    assert main([str(tmp_path), "10.0.0.1", "--force"]) == 0
    assert ca.read_bytes() != first


@pytest.mark.parametrize("address", ["tls://10.0.0.1:8786", "10.0.0.1:8786", "two words", ""])
def test_the_command_refuses_an_address_that_is_neither_ip_nor_host_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], address: str
) -> None:
    with pytest.raises(SystemExit) as refused:
        main([str(tmp_path / "tls"), address])
    assert refused.value.code == 2
    assert "neither an IP address nor a host name" in capsys.readouterr().err
    assert not (tmp_path / "tls").exists()
