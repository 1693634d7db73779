"""Prometheus metrics and a health check served on `--metrics-port` by each long-running command, and
the two metrics every service exports: `olstream_healthy` and `olstream_build_info`."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Gauge, generate_latest

from olstream.shared.errors import ConfigError
from olstream.shared.version import package_version

log = logging.getLogger(__name__)


class _HealthState:
    def __init__(self) -> None:
        self.healthy = True
        self.reason = "ok"


HEALTH = _HealthState()
HEALTHY = Gauge(
    "olstream_healthy", "1 while /healthz answers 200, 0 while it answers 503 (the reason is its body)"
)
HEALTHY.set(1)
BUILD_INFO = Gauge(
    "olstream_build_info", "always 1; its label `version` is the olstream package version", ["version"]
)
BUILD_INFO.labels(version=package_version()).set(1)


def set_health(healthy: bool, reason: str = "ok") -> None:
    HEALTH.healthy = healthy
    HEALTH.reason = reason
    HEALTHY.set(1 if healthy else 0)


def serve_metrics(
    port: int, host: str = "127.0.0.1", registry: CollectorRegistry = REGISTRY
) -> ThreadingHTTPServer:
    """Serve `/metrics` (Prometheus text format) and `/healthz` in a daemon thread; port 0 picks one."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/metrics"):
                body, status, ctype = generate_latest(registry), 200, CONTENT_TYPE_LATEST
            elif self.path.startswith("/healthz"):
                status = 200 if HEALTH.healthy else 503
                body, ctype = HEALTH.reason.encode(), "text/plain; charset=utf-8"
            else:
                body, status, ctype = b"not found", 404, "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as e:  # a host that is not this machine's, a port in use: a setting to fix
        where = f"{host}:{port} (--metrics-host, --metrics-port)"
        raise ConfigError(f"cannot serve metrics on {where}: {e}") from e
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    log.info("serving metrics on http://%s:%d/metrics", host, server.server_address[1])
    return server
