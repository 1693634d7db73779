"""Host-name checking over TLS: a server whose certificate a trusted CA signed, but for another name.

librdkafka's clients (every service's first call, `kafka_admin.check_connection`) refuse it with
one line and exit 77; faust's TLS context refuses it too, and takes it once host-name checking is
switched off (`ssl.endpoint.identification.algorithm=none`), which shows the CA itself is trusted.
The server is a plain TLS listener on loopback: the refusal happens in the handshake, before any
Kafka request.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from olstream.shared.errors import ExitCode
from olstream.shared.kafka_clients import ssl_context
from tests.support.stream_support import OLSTREAM, env

pytestmark = pytest.mark.integration

OPENSSL_CNF = """\
[req]
distinguished_name = dn
prompt = no

[dn]
CN = unused

[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign

[v3_server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:elsewhere.invalid
"""


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def elsewhere(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """(port, CA file) of a TLS server on 127.0.0.1 whose certificate names only elsewhere.invalid."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (olstream kafka up --security sasl_ssl needs it too)")
    (tmp_path / "openssl.cnf").write_text(OPENSSL_CNF)
    _openssl(tmp_path, "req", "-x509", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "2",
             "-config", "openssl.cnf", "-extensions", "v3_ca", "-subj", "/CN=test CA",
             "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
    _openssl(tmp_path, "req", "-new", "-newkey", "rsa:2048", "-nodes", "-config", "openssl.cnf",
             "-subj", "/CN=elsewhere.invalid", "-keyout", "server.key", "-out", "server.csr")  # fmt: skip
    _openssl(tmp_path, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-set_serial", "7", "-days", "2", "-extfile", "openssl.cnf", "-extensions", "v3_server",
             "-out", "server.pem")  # fmt: skip
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "server.pem", tmp_path / "server.key")
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                try:
                    with server.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(1)
                except (OSError, ssl.SSLError):
                    pass  # the client refused the handshake: what the tests want

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], tmp_path / "ca.pem"
    finally:
        stop.set()
        listener.close()
        thread.join(5)


def test_a_certificate_for_another_host_is_refused_with_one_line_and_exit_77(
    elsewhere: tuple[int, Path],
) -> None:
    port, ca = elsewhere
    for command in ("status", "worker"):
        extra = ["--data-dir", str(ca.parent / "worker")] if command == "worker" else []
        done = subprocess.run(
            [*OLSTREAM, command, "--bootstrap", f"127.0.0.1:{port}", *extra,
             "--kafka-security-protocol", "SSL", "--kafka-ssl-ca", str(ca)],
            capture_output=True, text=True, env=env(), timeout=120,
        )  # fmt: skip
        output = done.stdout + done.stderr
        assert done.returncode == ExitCode.KAFKA_REFUSED, (
            f"{command}: exit {done.returncode}\n{output[-3000:]}"
        )
        refused = [line for line in output.splitlines() if "refused the connection" in line]
        assert len(refused) == 1, f"{command}:\n{output[-3000:]}"
        assert "certificate verify failed" in refused[0], refused[0]
        assert "Traceback" not in output, f"{command}:\n{output[-3000:]}"


def _handshake(context: ssl.SSLContext, port: int) -> None:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1"),
    ):
        pass


def test_faust_refuses_a_certificate_for_another_host_unless_host_names_are_not_checked(
    elsewhere: tuple[int, Path],
) -> None:
    port, ca = elsewhere
    with pytest.raises(ssl.SSLCertVerificationError, match=r"IP address mismatch|hostname mismatch"):
        _handshake(ssl_context({"ssl.ca.location": str(ca)}), port)
    unchecked = {"ssl.ca.location": str(ca), "ssl.endpoint.identification.algorithm": "none"}
    _handshake(ssl_context(unchecked), port)  # the same CA, host names not checked: taken
