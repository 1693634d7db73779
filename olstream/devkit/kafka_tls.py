"""The certificates and passwords of a `sasl_ssl` local cluster, generated once per data dir.

`ensure_security(home)` creates, the first time, in the cluster's directory:

- `credentials.json` (0600): random passwords of the users `admin` (the brokers' own) and
  `olstream` (the client), and of the brokers' keystore;
- `tls/ca.pem` (+ `ca.key`, 0600): the CA every client trusts;
- `tls/broker.pem`, `broker.key` (0600), `broker.p12` (0600): the one certificate every node
  uses, for DNS:localhost and IP:127.0.0.1, signed by that CA;
- `tls/other-ca.pem`: a second CA that signed nothing the brokers use ("untrusted CA" checks).

Later calls read them back. Only `openssl` is needed (no Python crypto package). No password
is ever logged, printed or put in an error message, and openssl gets them through its environment.
The SCRAM users' passwords do go on the command line of Kafka's storage tool, for the two seconds
it formats a new data dir (`kafka_sasl`): other local users could read them from /proc then.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
from pathlib import Path

from olstream.devkit.kafka_config import render_properties
from olstream.devkit.kafka_sasl import ADMIN_USER, CLIENT_USER, BrokerSecurity, client_properties
from olstream.shared.errors import InfrastructureError

log = logging.getLogger(__name__)

TLS_DIR = "tls"
CREDENTIALS_FILE = "credentials.json"
CLIENT_PROPERTIES = "client.properties"
CERT_DAYS = 3650
_TLS_FILES = ("ca.pem", "ca.key", "broker.pem", "broker.key", "broker.p12", "other-ca.pem")
_PASSWORD_ENV = "OLSTREAM_KEYSTORE_PASSWORD"
_OPENSSL_CNF = """\
[req]
distinguished_name = dn
prompt = no

[dn]
CN = olstream local Kafka CA

[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[v3_broker]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read (0600), atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(path)


def _openssl() -> str:
    found = shutil.which("openssl") or ("/usr/bin/openssl" if Path("/usr/bin/openssl").is_file() else None)
    if found is None:
        raise InfrastructureError("`openssl` is not on PATH; `kafka up --security sasl_ssl` needs it")
    return found


def _run_openssl(cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
    cmd = [_openssl(), *args]
    result = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, check=False
    )
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()[-2000:]
        raise InfrastructureError(f"openssl {args[0]} failed in {cwd} (exit {result.returncode}):\n{output}")


def _new_ca(staging: Path, name: str, cn: str) -> None:
    _run_openssl(
        staging,
        *("req", "-x509", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", str(CERT_DAYS)),
        *("-config", "openssl.cnf", "-extensions", "v3_ca", "-subj", f"/CN={cn}"),
        *("-keyout", f"{name}.key", "-out", f"{name}.pem"),
    )


def _generate_tls(tls_dir: Path, keystore_password: str) -> None:
    """A CA, the brokers' certificate and keystore, and an unrelated CA, into `tls_dir`."""
    staging = tls_dir.with_name(f"{tls_dir.name}.staging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o700, parents=True)
    try:
        (staging / "openssl.cnf").write_text(_OPENSSL_CNF)
        _new_ca(staging, "ca", "olstream local Kafka CA")
        _new_ca(staging, "other-ca", "olstream untrusted CA (signs nothing)")
        (staging / "other-ca.key").unlink()
        _run_openssl(
            staging,
            *("req", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256", "-config", "openssl.cnf"),
            *("-subj", "/CN=localhost", "-keyout", "broker.key", "-out", "broker.csr"),
        )
        _run_openssl(
            staging,
            *("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-sha256"),
            *("-set_serial", str(secrets.randbits(63) + 1), "-days", str(CERT_DAYS)),
            *("-extfile", "openssl.cnf", "-extensions", "v3_broker", "-out", "broker.pem"),
        )
        # The password reaches openssl through its environment, never its command line.
        env = {**os.environ, _PASSWORD_ENV: keystore_password}
        _run_openssl(
            staging,
            *("pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-certfile", "ca.pem"),
            *("-name", "broker", "-out", "broker.p12", "-passout", f"env:{_PASSWORD_ENV}"),
            env=env,
        )
        for name in ("broker.csr", "openssl.cnf"):
            (staging / name).unlink()
        for name in ("ca.key", "broker.key", "broker.p12"):
            (staging / name).chmod(0o600)
        for name in ("ca.pem", "other-ca.pem", "broker.pem"):
            (staging / name).chmod(0o644)
        shutil.rmtree(tls_dir, ignore_errors=True)
        staging.chmod(0o755)
        staging.rename(tls_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("generated a CA and the brokers' certificate (localhost, 127.0.0.1) in %s", tls_dir)


def _read_credentials(path: Path) -> BrokerSecurity | None:
    try:
        doc = json.loads(path.read_text())
        users = doc["users"]
        return BrokerSecurity(
            tls_dir=path.parent / TLS_DIR,
            admin_password=str(users[ADMIN_USER]),
            client_password=str(users[CLIENT_USER]),
            keystore_password=str(doc["keystore_password"]),
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as e:
        # the message names the file and the problem, never a value read from it
        raise InfrastructureError(f"unreadable credentials file {path} ({type(e).__name__})") from None


def load_security(home: Path) -> BrokerSecurity | None:
    """The cluster's generated passwords and files; None when it has none (a plaintext cluster)."""
    security = _read_credentials(home / CREDENTIALS_FILE)
    if security is None or not all((security.tls_dir / name).is_file() for name in _TLS_FILES):
        return None
    return security


def ensure_security(home: Path) -> BrokerSecurity:
    """The cluster's passwords and certificates, generated the first time (see the module's doc)."""
    home.mkdir(parents=True, exist_ok=True)
    credentials = home / CREDENTIALS_FILE
    security = _read_credentials(credentials)
    if security is None:
        security = BrokerSecurity(
            tls_dir=home / TLS_DIR,
            admin_password=secrets.token_urlsafe(24),
            client_password=secrets.token_urlsafe(24),
            keystore_password=secrets.token_urlsafe(24),
        )
        doc = {
            "users": security.passwords,
            "keystore_password": security.keystore_password,
        }
        write_private(credentials, json.dumps(doc, indent=2) + "\n")
        shutil.rmtree(security.tls_dir, ignore_errors=True)  # a keystore of other passwords
        log.info("generated the passwords of users %s and %s in %s", ADMIN_USER, CLIENT_USER, credentials)
    if not all((security.tls_dir / name).is_file() for name in _TLS_FILES):
        _generate_tls(security.tls_dir, security.keystore_password)
    return security


def write_client_properties(home: Path, security: BrokerSecurity) -> Path:
    """`<home>/client.properties` (0600): the client user's librdkafka settings."""
    path = home / CLIENT_PROPERTIES
    write_private(path, render_properties(client_properties(security), header=False))
    return path


def redact(text: str, security: BrokerSecurity | None) -> str:
    """`text` with every password of `security` as ***."""
    for secret in security.secrets() if security is not None else ():
        text = text.replace(secret, "***")
    return text
