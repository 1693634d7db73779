"""Where events go: an OpenLineage HTTP receiver, a newline-delimited JSON file, or stdout.

Every transport answers `send(event)` with a DeliveryResult and makes what it accepted
durable in `make_durable()`, which the sink calls before committing the offsets it covers.
HTTP uses aiohttp (keep-alive pool bounded by the sink's concurrency), chosen over httpx by
bench/sink.py (docs/sink.md). Like openlineage-python's HttpTransport, it sends the custom
headers of the settings on every request and, with compression gzip, gzips each body (level 3)
with `Content-Encoding: gzip`.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import ssl
import sys
from collections.abc import Callable
from typing import IO, Protocol

import aiohttp
from yarl import URL

from olstream.connectors.sink.delivery import (
    DELIVERED,
    DeliveryResult,
    Outcome,
    PendingEvent,
    classify,
    parse_retry_after,
)
from olstream.connectors.sink.destination import SECRET_MIN_CHARS
from olstream.connectors.sink.settings import SinkSettings
from olstream.shared.logs import redact, register_secret

log = logging.getLogger(__name__)

RESPONSE_EXCERPT_BYTES = 1024
GZIP_LEVEL = 3  # openlineage-python's: higher levels are twice as slow for little gain


class SinkTransport(Protocol):
    async def start(self) -> None: ...

    async def send(self, event: PendingEvent) -> DeliveryResult: ...

    def make_durable(self) -> None:
        """Everything send() accepted so far survives a crash once this returns."""

    async def close(self) -> None: ...


class HttpTransport:
    """POST the Kafka value byte for byte to the receiver, over a bounded keep-alive pool.

    The URL's user info (`https://user:password@host`, `https://TOKEN@host`) is taken out of the URL
    and sent as Basic auth, as aiohttp would: the URL the transport holds, and any exception text
    that names it, carries no credential. Headers are those of openlineage-python, in its order:
    `Content-Type: application/json`, the `Authorization`, then the custom headers (which may
    replace Content-Type; settings refuse a custom Authorization next to a credential).
    """

    def __init__(self, settings: SinkSettings) -> None:
        if not settings.url:
            raise ValueError("HttpTransport needs a URL")
        parsed = URL(settings.url)
        basic = aiohttp.BasicAuth.from_url(parsed)
        self.url = str(parsed.with_user(None)) if basic is not None else settings.url
        self.settings = settings
        self.headers = {"Content-Type": "application/json"}
        if settings.api_key:
            self.headers["Authorization"] = f"Bearer {settings.api_key}"
        elif basic is not None:
            self.headers["Authorization"] = basic.encode()
            register_secret(self.headers["Authorization"].partition(" ")[2])  # a receiver may echo it
        for name, value in settings.headers:
            for same in [k for k in self.headers if k.lower() == name.lower()]:
                del self.headers[same]  # header names are case-insensitive: one of each
            self.headers[name] = value
            if len(value) >= SECRET_MIN_CHARS:
                register_secret(value)  # as build_settings does: a receiver may echo it
        self.gzip = settings.compression == "gzip"
        if self.gzip:
            self.headers["Content-Encoding"] = "gzip"
        self._session: aiohttp.ClientSession | None = None

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()  # verification on, system CAs
        if self.settings.ca_file:
            context.load_verify_locations(cafile=self.settings.ca_file)
        return context

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self.settings.concurrency,
            ssl=self._ssl_context() if self.url.startswith("https://") else False,
            enable_cleanup_closed=True,
        )
        timeout = aiohttp.ClientTimeout(
            total=self.settings.total_timeout, sock_connect=self.settings.connect_timeout
        )
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)

    async def send(self, event: PendingEvent) -> DeliveryResult:
        result, _body = await self._post(self.url, event.value)
        return result

    async def send_batch(self, events: list[PendingEvent]) -> tuple[list[DeliveryResult], bool]:
        """POST events to `{url}/batch` as one JSON array (each element the Kafka value byte for byte).

        Returns one result per event and whether the answer concerned the whole batch (a non-2xx)
        rather than single events (200 with `failed_events`, as in the spec's OpenLineage.yml).
        """
        body = b"[" + b",".join(e.value for e in events) + b"]"
        result, answer = await self._post(self.url.rstrip("/") + "/batch", body)
        if result.outcome is not Outcome.DELIVERED:
            return [result] * len(events), True
        results = [DELIVERED] * len(events)
        for failure in failed_events(answer):
            index = failure.get("index")
            if isinstance(index, int) and 0 <= index < len(events):
                reason = str(failure.get("reason", ""))[:RESPONSE_EXCERPT_BYTES]
                outcome = Outcome.RETRY if failure.get("retriable") else Outcome.REJECTED
                results[index] = DeliveryResult(outcome, 200, f"batch: {reason}")
        return results, False

    async def _post(self, url: str, body: bytes) -> tuple[DeliveryResult, bytes]:
        assert self._session is not None, "start() first"
        if self.gzip:
            body = gzip.compress(body, compresslevel=GZIP_LEVEL)
        try:
            async with self._session.post(
                url, data=body, headers=self.headers, allow_redirects=False
            ) as response:
                status = response.status
                if 200 <= status < 300:
                    return DELIVERED, await response.read()
                excerpt = (await response.content.read(RESPONSE_EXCERPT_BYTES)).decode("utf-8", "replace")
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            detail = redact(f"{type(e).__name__}: {e}".strip(": "))  # aiohttp's texts may name the URL
            return DeliveryResult(Outcome.RETRY, None, detail), b""
        return DeliveryResult(classify(status), status, excerpt, retry_after), b""

    def make_durable(self) -> None:
        return None  # a 2xx is the receiver's promise

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def failed_events(answer: bytes) -> list[dict[str, object]]:
    """The `failed_events` of a batch answer (empty for 204, "success", or an unreadable body)."""
    if not answer.strip():
        return []
    try:
        doc = json.loads(answer)
    except ValueError:
        return []
    failures = doc.get("failed_events") if isinstance(doc, dict) else None
    return [f for f in failures if isinstance(f, dict)] if isinstance(failures, list) else []


def one_line(body: bytes) -> bytes:
    """The event as one NDJSON line (compacted only when the value itself spans lines)."""
    if b"\n" not in body and b"\r" not in body:
        return body
    return json.dumps(json.loads(body), separators=(",", ":"), ensure_ascii=False).encode()


class FileTransport:
    """Append events as newline-delimited JSON; flushed and fsynced before offsets are committed."""

    def __init__(self, path: str, fsync: Callable[[int], None] = os.fsync) -> None:
        self.path = path
        self._fsync = fsync
        self._file: IO[bytes] | None = None
        self._dirty = False

    async def start(self) -> None:
        self._file = open(self.path, "ab")  # noqa: SIM115 - held open for the sink's lifetime

    async def send(self, event: PendingEvent) -> DeliveryResult:
        assert self._file is not None, "start() first"
        try:
            self._file.write(one_line(event.value) + b"\n")
        except ValueError as e:  # not JSON and spanning lines: cannot be one NDJSON line
            return DeliveryResult(Outcome.REJECTED, None, f"value is not one-line JSON: {e}")
        except OSError as e:
            return DeliveryResult(Outcome.RETRY, None, f"cannot write {self.path}: {e.strerror}")
        self._dirty = True
        return DELIVERED

    def make_durable(self) -> None:
        if self._file is not None and self._dirty:
            self._file.flush()
            self._fsync(self._file.fileno())
            self._dirty = False

    async def close(self) -> None:
        if self._file is not None:
            self.make_durable()
            self._file.close()
            self._file = None


class ConsoleTransport:
    """One event per line on stdout."""

    def __init__(self, stream: IO[bytes] | None = None) -> None:
        self.stream = stream or sys.stdout.buffer

    async def start(self) -> None:
        return None

    async def send(self, event: PendingEvent) -> DeliveryResult:
        try:
            self.stream.write(one_line(event.value) + b"\n")
        except ValueError as e:
            return DeliveryResult(Outcome.REJECTED, None, f"value is not one-line JSON: {e}")
        return DELIVERED

    def make_durable(self) -> None:
        self.stream.flush()

    async def close(self) -> None:
        self.stream.flush()


class DryRunTransport:
    """Print what would be sent and where; send nothing."""

    def __init__(self, destination: str, stream: IO[str] | None = None) -> None:
        self.destination = destination
        self.stream = stream or sys.stdout

    async def start(self) -> None:
        return None

    async def send(self, event: PendingEvent) -> DeliveryResult:
        key = event.key.decode("utf-8", "replace") if event.key is not None else None
        self.stream.write(
            f"would send {event.where()} key={key!r} ({len(event.value)} bytes) to {self.destination}: "
            f"{event.value.decode('utf-8', 'replace')}\n"
        )
        return DELIVERED

    def make_durable(self) -> None:
        self.stream.flush()

    async def close(self) -> None:
        self.stream.flush()


def make_transport(settings: SinkSettings) -> SinkTransport:
    if settings.dry_run:
        return DryRunTransport(settings.destination)
    if settings.transport == "http":
        return HttpTransport(settings)
    if settings.transport == "file":
        assert settings.file_path is not None
        return FileTransport(settings.file_path)
    return ConsoleTransport()


async def send(transport: SinkTransport, batch: list[PendingEvent]) -> list[DeliveryResult]:
    """Send a batch: as one request to an HTTP receiver, else one event at a time."""
    if len(batch) == 1 or not isinstance(transport, HttpTransport):
        return [await transport.send(e) for e in batch]
    results, whole = await transport.send_batch(batch)
    if whole and results[0].outcome is Outcome.REJECTED:
        # the receiver refused the batch as a whole: find the culprits one by one
        return [await transport.send(e) for e in batch]
    return results
