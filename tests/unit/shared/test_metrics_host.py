"""`--metrics-host`: declared once, read by every service, and a bad address is a setting error."""

from __future__ import annotations

import urllib.request

import pytest

from olstream.connectors.sink.settings import build_settings
from olstream.connectors.source.settings import resolve_source_settings
from olstream.shared.config import METRICS_HOST
from olstream.shared.errors import ConfigError
from olstream.shared.metrics import serve_metrics
from olstream.streams.settings import resolve_worker_settings


def test_every_service_binds_loopback_by_default_and_reads_the_variable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert METRICS_HOST.default == "127.0.0.1" and METRICS_HOST.env_name == "OLSTREAM_METRICS_HOST"
    env = {"OLSTREAM_METRICS_HOST": "0.0.0.0"}
    worker, _ = resolve_worker_settings({}, env)
    source, _ = resolve_source_settings({"log_url": "sqlite:///x.db"}, env)
    sink = build_settings({"console": True}, env, tmp_path, tmp_path)
    assert worker.metrics_host == source.metrics_host == sink.metrics_host == "0.0.0.0"
    assert resolve_worker_settings({"metrics_host": "::1"}, env)[0].metrics_host == "::1"  # a flag wins
    assert resolve_worker_settings({}, {})[0].metrics_host == "127.0.0.1"


def test_metrics_are_served_on_the_host_given() -> None:
    server = serve_metrics(0, "127.0.0.1")
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            assert answer.status == 200
    finally:
        server.shutdown()


def test_an_address_that_is_not_this_hosts_is_a_setting_error() -> None:
    with pytest.raises(ConfigError, match="--metrics-host"):
        serve_metrics(0, "203.0.113.7")  # TEST-NET-3: never a local address
