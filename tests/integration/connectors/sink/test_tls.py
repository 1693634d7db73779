"""TLS: verification is always on; `--ca-file` adds a CA the receiver's certificate chains to."""

from __future__ import annotations

import shutil
import signal
import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.receiver import Receiver
from tests.support.sink_events import make_events, produce
from tests.support.sink_harness import assert_all_delivered_in_order, run_sink, start_sink

pytestmark = pytest.mark.integration

MakeTopic = Callable[..., str]


def make_ca_and_server_cert(d: Path) -> tuple[Path, Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make test certificates")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=olstream test CA")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=127.0.0.1")  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "san.ext")  # fmt: skip
    return d / "ca.pem", d / "server.pem", d / "server.key"


def test_https_with_an_added_ca_and_refusal_without_it(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    ca, cert, key = make_ca_and_server_cert(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    topic = make_topic(partitions=1)
    events = make_events(runs=20, events_per_run=2, jobs=4)
    produce(kafka_bootstrap, topic, events)
    with Receiver(tls=context) as receiver:
        untrusted = start_sink(
            kafka_bootstrap, topic, f"{unique_group}-untrusted", "--url", receiver.url,
            "--dlq-topic", f"{topic}.dlq", log_path=tmp_path / "untrusted.log",
        )  # fmt: skip
        try:
            log = tmp_path / "untrusted.log"
            refused = receiver.wait_for(lambda r: "CERTIFICATE_VERIFY_FAILED" in _read(log), 30)
        finally:
            untrusted.send_signal(signal.SIGTERM)
            untrusted.wait(30)
        assert refused, _read(tmp_path / "untrusted.log")[-3000:]
        assert receiver.accepted == []
        rc = run_sink(
            kafka_bootstrap, topic, unique_group, "--url", receiver.url, "--ca-file", str(ca),
            "--dlq-topic", f"{topic}.dlq", log_path=tmp_path / "trusted.log",
        )  # fmt: skip
        accepted = receiver.accepted
    assert rc == 0, _read(tmp_path / "trusted.log")[-3000:]
    assert_all_delivered_in_order(events, accepted)


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""
