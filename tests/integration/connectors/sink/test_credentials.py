"""A receiver URL's user info, e.g. `http://user:password@host`, never shows: not in a log line (text
or JSON), a retry warning, the startup line, an error, a DLQ header, /metrics, /healthz or
--print-config; it is still sent, as Basic auth."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from olstream.devkit.process import free_port
from tests.support.receiver import Receiver, Reply, Request
from tests.support.sink_events import identity, make_events, produce
from tests.support.sink_harness import (
    assert_all_delivered_in_order,
    committed_total,
    run_sink,
    sink_command,
    start_sink,
    terminate,
)
from tests.support.stop_support import committed_offsets
from tests.support.stream_support import Out, consume_all

pytestmark = pytest.mark.integration

MakeTopic = Callable[..., str]
USER = "sink-user-q7"
PASSWORD = "s3cr3t-xyz"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def assert_no_credential(text: str) -> None:
    for secret in (USER, PASSWORD, BASIC):
        assert secret not in text, f"{secret!r} shown in: ...{text[max(0, text.find(secret) - 300) :][:600]}"


def wait_for_text(path: Path, needle: str, count: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text(errors="replace").count(needle) >= count:
            return True
        time.sleep(0.2)
    return False


def fetch(port: int, path: str) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return str(answer.read().decode())
    except urllib.error.HTTPError as e:  # /healthz answers 503 on a configuration problem
        return str(e.read().decode())


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_an_unreachable_receiver_never_shows_the_url_credentials(
    log_format: str, kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, make_events(runs=10, events_per_run=2, jobs=3))
    closed = free_port()
    url = f"http://{USER}:{PASSWORD}@127.0.0.1:{closed}"
    metrics_port = free_port()
    log = tmp_path / "sink.log"
    proc = start_sink(
        kafka_bootstrap, topic, unique_group, "--url", url, "--max-backoff", "1", "--connect-timeout", "1",
        "--metrics-port", str(metrics_port), "--log-format", log_format, "--dlq-topic", f"{topic}.dlq",
        log_path=log,
    )  # fmt: skip
    try:
        retried = wait_for_text(log, "cannot deliver", 3, 60)
        served = fetch(metrics_port, "/metrics") + fetch(metrics_port, "/healthz")
    finally:
        rc = terminate(proc)
    text = log.read_text()
    assert retried and rc == 0, text[-3000:]
    if log_format == "json":
        assert all(json.loads(line) for line in text.splitlines())
    shown = f"http://***@127.0.0.1:{closed}/api/v1/lineage"
    assert text.count(shown) >= 4, text[-3000:]  # the startup line and every retry warning
    assert "Cannot connect to host" in text  # aiohttp's own text, redacted
    assert "olstream_sink_retried_total" in served
    assert_no_credential(text + served)
    assert committed_offsets(kafka_bootstrap, unique_group, topic) == [-1001, -1001]

    printed = subprocess.run(
        sink_command(kafka_bootstrap, topic, unique_group, "--url", url, "--print-config"),
        capture_output=True,
        timeout=60,
    )
    assert printed.returncode == 0 and json.loads(printed.stdout)["url"] == shown
    assert_no_credential((printed.stdout + printed.stderr).decode())


def _headers(message: Out) -> dict[str, str]:
    return {k: v.decode() for k, v in message.headers}


def test_a_receiver_answering_500_and_rejecting_never_sees_its_credentials_logged_or_dead_lettered(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    events = make_events(runs=20, events_per_run=3, jobs=4)
    produce(kafka_bootstrap, topic, events)
    rejected_job = "sinktest/job-1"

    with Receiver() as receiver:
        url = receiver.url.replace("http://", f"http://{USER}:{PASSWORD}@")

        def respond(request: Request, n: int) -> Reply:
            job, _run, kind = identity(request.body)
            if kind == "RUNNING" and job == rejected_job:  # an answer that echoes the request
                echo = {
                    "error": "rejected",
                    "url": url,
                    "authorization": request.headers.get("authorization"),
                }
                return Reply(400, json.dumps(echo).encode())
            return Reply(201)

        receiver.respond_with(respond)
        receiver.script(*(Reply(500, f"internal error at {url}".encode()) for _ in range(4)))
        log = tmp_path / "sink.log"
        dlq = f"{topic}.dlq"
        rc = run_sink(
            kafka_bootstrap, topic, unique_group, "--url", url, "--max-backoff", "1", "--dlq-topic", dlq,
            log_path=log,
        )  # fmt: skip
        requests = receiver.requests
        accepted = receiver.accepted
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert [r.status for r in requests[:4]] == [500] * 4
    assert all(r.headers.get("authorization") == f"Basic {BASIC}" for r in requests)  # still sent
    expected_rejects = [
        e for e in events if identity(e.value)[0] == rejected_job and identity(e.value)[2] == "RUNNING"
    ]
    assert_all_delivered_in_order([e for e in events if e not in expected_rejects], accepted)
    dead = consume_all(kafka_bootstrap, dlq, expect=len(expected_rejects), idle=0.5)
    assert len(dead) == len(expected_rejects) > 0
    headers = [_headers(m) for m in dead]
    for h in headers:
        assert h["olstream.status"] == "400" and h["olstream.response"].startswith('{"error": "rejected"')
        assert f"http://***@127.0.0.1:{receiver.port}" in h["olstream.response"]
    assert committed_total(kafka_bootstrap, unique_group, topic) == len(events)
    assert "HTTP 500" in text and "dead-lettered to" in text
    assert_no_credential(text + json.dumps(headers))
