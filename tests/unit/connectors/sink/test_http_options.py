"""The http transport: custom headers and gzip, against a real receiver and openlineage-python."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest

from olstream.connectors.sink.delivery import DeliveryResult, Outcome, PendingEvent
from olstream.connectors.sink.settings import SinkSettings, build_settings
from olstream.connectors.sink.transports import DryRunTransport, HttpTransport
from olstream.shared import logs
from tests.support.receiver import Receiver, Reply
from tests.support.sink_events import make_events

T = "OPENLINEAGE__TRANSPORT__"
ORG = "acme-org-t0ken"


@pytest.fixture(autouse=True)
def _own_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "_SECRETS", set())


def settings_for(receiver: Receiver, env: dict[str, str], tmp_path: Path, **flags: Any) -> SinkSettings:
    env = {"OPENLINEAGE_URL": receiver.url, **env}
    return build_settings({"http_timeout": 5, **flags}, env, tmp_path, tmp_path)


async def deliver(transport: HttpTransport, values: list[bytes], batch: bool = False) -> list[Outcome]:
    await transport.start()
    try:
        events = [PendingEvent("t", 0, n, b"k", v, 1) for n, v in enumerate(values)]
        if batch:
            results, _whole = await transport.send_batch(events)
            return [r.outcome for r in results]
        return [(await transport.send(e)).outcome for e in events]
    finally:
        await transport.close()


ENV = {T + "COMPRESSION": "gzip", T + "CUSTOM_HEADERS__X_ORG": ORG, T + "CUSTOM_HEADERS__X-TEAM": "lineage"}


def test_custom_headers_on_every_request_and_gzip_bodies_decode_to_the_same_json(tmp_path: Path) -> None:
    values = [r.value for r in make_events(3, 1)]
    with Receiver(validate=True) as receiver:  # the receiver gunzips, then validates against the spec
        transport = HttpTransport(settings_for(receiver, ENV, tmp_path))
        assert asyncio.run(deliver(transport, values)) == [Outcome.DELIVERED] * 3
        requests, invalid = receiver.requests, receiver.invalid
    assert invalid == []
    assert [r.body for r in requests] == values  # byte for byte once decoded
    for r in requests:
        assert r.headers["content-encoding"] == "gzip" and r.headers["content-type"] == "application/json"
        assert r.headers["x-team"] == "lineage" and r.headers["x_org"] == ORG
        assert int(r.headers["content-length"]) != len(r.body)  # what travelled was the gzip stream


def test_the_batch_endpoint_is_gzipped_too(tmp_path: Path) -> None:
    values = [r.value for r in make_events(4, 1)]
    with Receiver(validate=True) as receiver:
        transport = HttpTransport(settings_for(receiver, ENV, tmp_path, batch_size=4))
        assert asyncio.run(deliver(transport, values, batch=True)) == [Outcome.DELIVERED] * 4
        request, invalid = receiver.requests[0], receiver.invalid
    assert invalid == [] and request.path == "/api/v1/lineage/batch"
    assert request.headers["content-encoding"] == "gzip"
    assert json.loads(request.body) == [json.loads(v) for v in values]


def test_without_compression_the_body_is_the_value_byte_for_byte(tmp_path: Path) -> None:
    value = make_events(1, 1)[0].value
    with Receiver(validate=True) as receiver:
        env = {T + "CUSTOM_HEADERS__X_ORG": ORG}
        asyncio.run(deliver(HttpTransport(settings_for(receiver, env, tmp_path)), [value]))
        request = receiver.requests[0]
    assert request.body == value and "content-encoding" not in request.headers
    assert request.headers["x_org"] == ORG


def test_a_custom_content_type_replaces_the_default_once_as_in_openlineage_python(tmp_path: Path) -> None:
    with Receiver(validate=False) as receiver:
        env = {T + "CUSTOM_HEADERS": '{"content-type": "application/json; charset=utf-8"}'}
        transport = HttpTransport(settings_for(receiver, env, tmp_path))
        assert transport.headers == {"content-type": "application/json; charset=utf-8"}


def test_the_headers_and_body_are_those_openlineage_python_sends(tmp_path: Path) -> None:
    from openlineage.client.transport.http import HttpConfig
    from openlineage.client.transport.http import HttpTransport as TheirTransport

    config = {
        "type": "http",
        "url": "http://m:5000",
        "auth": {"type": "api_key", "apiKey": "k3y-compared"},
        "compression": "gzip",
        "custom_headers": {"X-Org": ORG, "x_team": "lineage"},
    }
    path = tmp_path / "openlineage.yml"
    path.write_text(json.dumps({"transport": config}))
    ours = HttpTransport(build_settings({}, {"OPENLINEAGE_CONFIG": str(path)}, tmp_path, tmp_path))
    event = make_events(1, 1)[0].value
    body, theirs = TheirTransport(HttpConfig.from_dict(dict(config)))._prepare_request(event.decode())
    assert ours.headers == theirs
    assert isinstance(body, bytes) and gzip.decompress(body) == event


def test_a_dry_run_names_the_member(tmp_path: Path) -> None:
    path = tmp_path / "openlineage.yml"
    members = {"a": {"type": "http", "url": "http://a:1"}, "b": {"type": "console"}}
    path.write_text(json.dumps({"transport": {"type": "composite", "transports": members}}))
    flags = {"transport_name": "a", "dry_run": True}
    settings = build_settings(flags, {"OPENLINEAGE_CONFIG": str(path)}, tmp_path, tmp_path)
    out = io.StringIO()
    asyncio.run(DryRunTransport(settings.destination, out).send(PendingEvent("t", 0, 0, None, b"{}", 1)))
    assert "to http://a:1/api/v1/lineage (transport a): {}" in out.getvalue()


def test_a_receiver_echoing_a_custom_header_shows_it_nowhere(tmp_path: Path) -> None:
    from olstream.connectors.sink.sink import Sink
    from olstream.shared import deadletter
    from tests.unit.connectors.sink.test_credentials import CapturingProducer

    async def post_once(transport: HttpTransport) -> DeliveryResult:
        await transport.start()
        try:
            return await transport.send(PendingEvent("t", 0, 0, b"k", b"{}", 1))
        finally:
            await transport.close()

    with Receiver(validate=False) as receiver:
        receiver.respond_with(lambda request, n: Reply(400, json.dumps(request.headers).encode()))
        settings = settings_for(receiver, {T + "CUSTOM_HEADERS__X_ORG": ORG}, tmp_path)
        rejected = asyncio.run(post_once(HttpTransport(settings)))
    assert rejected.outcome is Outcome.REJECTED and ORG in rejected.detail  # the receiver did echo it
    producer = CapturingProducer()
    sink = Sink(settings, HttpTransport(settings), None, producer)  # type: ignore[arg-type]
    sink._dead_letter(PendingEvent("t", 0, 0, b"k", b"{}", 1), rejected)
    shown = producer.produced[0]["headers"][deadletter.HTTP_RESPONSE].decode()
    assert ORG not in shown and '"x_org": "***"' in shown
