"""A receiver URL's user info: sent as Basic auth, never in an error text, a DLQ header or /healthz."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from olstream.connectors.sink.delivery import DeliveryResult, Outcome, PendingEvent
from olstream.connectors.sink.settings import SinkSettings, build_settings
from olstream.connectors.sink.sink import Sink
from olstream.connectors.sink.transports import HttpTransport
from olstream.devkit.process import free_port
from olstream.shared import deadletter, logs, metrics
from tests.support.receiver import Receiver, Reply

USER = "sink-user-q7"
PASSWORD = "s3cr3t-xyz"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


@pytest.fixture(autouse=True)
def _own_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "_SECRETS", set())


def settings_for(url: str, tmp_path: Any) -> SinkSettings:
    return build_settings({"url": url, "http_timeout": 2, "connect_timeout": 1}, {}, tmp_path, tmp_path)


async def post_once(transport: HttpTransport) -> DeliveryResult:
    await transport.start()
    try:
        return await transport.send(PendingEvent("t", 0, 0, b"k", b"{}", 1))
    finally:
        await transport.close()


def test_the_user_info_is_sent_as_basic_auth_and_the_url_holds_none(tmp_path: Any) -> None:
    with Receiver(validate=False) as receiver:
        url = receiver.url.replace("http://", f"http://{USER}:{PASSWORD}@")
        transport = HttpTransport(settings_for(url, tmp_path))
        assert USER not in transport.url and PASSWORD not in transport.url
        result = asyncio.run(post_once(transport))
        request = receiver.requests[0]
    assert result.outcome is Outcome.DELIVERED
    assert request.path == "/api/v1/lineage" and request.headers["authorization"] == f"Basic {BASIC}"


def test_a_token_as_the_user_name_is_sent_as_basic_auth(tmp_path: Any) -> None:
    with Receiver(validate=False) as receiver:
        url = receiver.url.replace("http://", "http://tok3n-q7@")
        asyncio.run(post_once(HttpTransport(settings_for(url, tmp_path))))
        auth = receiver.requests[0].headers["authorization"]
    assert base64.b64decode(auth.removeprefix("Basic ")) == b"tok3n-q7:"


def test_an_unreachable_receiver_error_names_no_credential(tmp_path: Any) -> None:
    url = f"http://{USER}:{PASSWORD}@127.0.0.1:{free_port()}"
    result = asyncio.run(post_once(HttpTransport(settings_for(url, tmp_path))))
    assert result.outcome is Outcome.RETRY and result.status is None
    assert "Cannot connect to host 127.0.0.1" in result.detail, result.detail
    assert USER not in result.detail and PASSWORD not in result.detail


class CapturingProducer:
    def __init__(self) -> None:
        self.produced: list[dict[str, Any]] = []

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Any, on_delivery: Any) -> None:
        self.produced.append({"topic": topic, "headers": dict(headers)})

    def poll(self, timeout: float) -> int:
        return 0


def test_dlq_headers_and_health_never_carry_an_echoed_credential(tmp_path: Any) -> None:
    """A receiver that echoes the request (its URL, its Authorization header) in a 400 and a 401."""
    with Receiver(validate=False) as receiver:
        url = receiver.url.replace("http://", f"http://{USER}:{PASSWORD}@")
        echo = json.dumps({"error": "bad", "url": url, "authorization": f"Basic {BASIC}"}).encode()
        receiver.script(Reply(400, echo), Reply(401, echo))
        settings = settings_for(url, tmp_path)
        rejected = asyncio.run(post_once(HttpTransport(settings)))
        misconfigured = asyncio.run(post_once(HttpTransport(settings)))
    assert rejected.outcome is Outcome.REJECTED and misconfigured.outcome is Outcome.MISCONFIGURED
    producer = CapturingProducer()
    sink = Sink(settings, HttpTransport(settings), None, producer)  # type: ignore[arg-type]
    event = PendingEvent("t", 0, 7, b"k", b"{}", 1)
    sink._dead_letter(event, rejected)
    shown = producer.produced[0]["headers"][deadletter.HTTP_RESPONSE].decode()
    assert shown.startswith('{"error": "bad"') and f"http://***@127.0.0.1:{receiver.port}" in shown
    try:
        sink._log_failure(event, misconfigured, 1.0)
        assert not metrics.HEALTH.healthy
        reason = metrics.HEALTH.reason
    finally:
        metrics.set_health(True)
    for text in (shown, reason):
        assert USER not in text and PASSWORD not in text and BASIC not in text, text
