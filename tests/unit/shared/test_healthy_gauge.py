"""`olstream_healthy` follows `/healthz`: 1 while it answers 200, 0 while it answers 503."""

from __future__ import annotations

import urllib.error
import urllib.request

from olstream.shared.metrics import HEALTH, serve_metrics, set_health


def fetch(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_gauge_says_what_healthz_answers() -> None:
    before = (HEALTH.healthy, HEALTH.reason)
    server = serve_metrics(0, "127.0.0.1")
    port = server.server_address[1]
    try:
        set_health(False, "receiver answered HTTP 401: configuration problem")
        assert fetch(port, "/healthz")[0] == 503
        assert "\nolstream_healthy 0.0\n" in fetch(port, "/metrics")[1]
        set_health(True)
        assert fetch(port, "/healthz")[0] == 200
        assert "\nolstream_healthy 1.0\n" in fetch(port, "/metrics")[1]
    finally:
        server.shutdown()
        set_health(*before)
