"""A conformance OpenLineage receiver: a real HTTP/1.1 server on loopback, scriptable.

It runs a raw asyncio HTTP server in a background thread (or, for benchmarks, as its
own process: `python -m tests.support.receiver --port 0`), records every request body
byte for byte (a `Content-Encoding: gzip` body decoded first), validates it against the
official OpenLineage schemas (optional), and
answers according to a script: a status with headers, a hang (accept, never answer), or
a dropped connection. `stop()` / `start()` simulate an outage on the same port. Options for
benchmarks: a fixed `latency` before every answer (a timer on the loop: other connections go
on meanwhile), and `track_runs` (the runId and eventType of every event, in arrival order, with
when it arrived and when its answer was due).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class Reply:
    """What the receiver does with one request: answer `status`, or `hang`, or `drop` the connection."""

    status: int = 201
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    action: str = "respond"  # respond | hang | drop
    delay: float = 0.0  # seconds before answering (a slow receiver)

    @staticmethod
    def hang() -> Reply:
        return Reply(action="hang")

    @staticmethod
    def drop() -> Reply:
        return Reply(action="drop")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float
    status: int | None  # what was answered (None for hang/drop)


Responder = Callable[[Request, int], Reply]


class Arrival(NamedTuple):
    """One event of an answered request (track_runs); times are time.monotonic() (system-wide)."""

    run_id: str  # "?" when the body did not parse
    event_type: str
    received_at: float
    answered_at: float  # when the answer was due: received_at + latency + the reply's delay


def always_created(request: Request, n: int) -> Reply:
    return Reply(201)


@dataclass
class _State:
    responder: Responder = always_created
    script: list[Reply] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    count: int = 0
    record: bool = True
    arrivals: list[Arrival] = field(default_factory=list)  # with track_runs
    first_at: float = 0.0
    last_at: float = 0.0


class _HttpProtocol(asyncio.Protocol):
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.hung = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.receiver._transports.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.receiver._transports.discard(self.transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while not self.hung and self.transport is not None and not self.transport.is_closing():
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            length = int(headers.get("content-length", "0"))
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            method, path = [*head[0].split(" "), "", ""][:2]
            self._answer(method, path, headers, self.receiver._decoded(headers, body))

    def _answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        assert self.transport is not None
        reply = self.receiver._decide(method, path, headers, body)
        if reply.action == "hang":
            self.hung = True
            return
        if reply.action == "drop":
            self.transport.abort()
            return
        lines = [f"HTTP/1.1 {reply.status} {REASONS.get(reply.status, 'Status')}"]
        lines.append(f"Content-Length: {len(reply.body)}")
        lines += [f"{k}: {v}" for k, v in reply.headers]
        response = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + reply.body
        closing = headers.get("connection", "").lower() == "close"
        delay = self.receiver.latency + reply.delay
        if delay > 0:  # a timer: this connection waits, the loop serves the others meanwhile
            asyncio.get_running_loop().call_later(delay, self._write, response, closing)
        else:
            self._write(response, closing)

    def _write(self, response: bytes, closing: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(response)
        if closing:
            self.transport.close()


class Receiver:
    """The scriptable receiver. Use as a context manager; `url` is its base URL."""

    def __init__(
        self,
        port: int = 0,
        validate: bool = True,
        record: bool = True,
        tls: ssl.SSLContext | None = None,
        latency: float = 0.0,
        track_runs: bool = False,
    ) -> None:
        """`latency`: seconds added before every answer (responses only, not hang or drop), on top of
        a Reply's own delay. `track_runs`: record each event's runId and eventType (`arrivals`)."""
        self.port = port
        self.latency = latency
        self.track_runs = track_runs
        self.tls = tls
        self.validate = validate
        self._state = _State(record=record)
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="receiver", daemon=True)
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.Transport] = set()
        self._validator: Any = None
        if validate:
            # Built here, in the test's thread, so a missing spec folder skips the test instead of
            # raising pytest's Skipped inside the server thread.
            from tests.support.openlineage_schema import validator

            self._validator = validator()
        self._thread.start()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Receiver:
        async def open_server() -> asyncio.Server:
            return await self._loop.create_server(
                lambda: _HttpProtocol(self), "127.0.0.1", self.port, reuse_address=True, ssl=self.tls
            )

        self._server = asyncio.run_coroutine_threadsafe(open_server(), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        """Close the listening socket and every open connection (an outage)."""

        async def close() -> None:
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()
            for t in list(self._transports):
                t.abort()

        with contextlib.suppress(TimeoutError):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._server = None

    def close(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    # -- scripting -------------------------------------------------------------------------
    def respond_with(self, responder: Responder) -> None:
        with self._lock:
            self._state.responder = responder

    def script(self, *replies: Reply) -> None:
        """Answer the next requests with these replies, in order, then fall back to the responder."""
        with self._lock:
            self._state.script.extend(replies)

    def _decide(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        with self._lock:
            n = self._state.count
            self._state.count += 1
            now = time.monotonic()
            if not n:
                self._state.first_at = now
            self._state.last_at = now
            probe = Request(method, path, headers, body, now, None)
            reply = self._state.script.pop(0) if self._state.script else self._state.responder(probe, n)
            status = reply.status if reply.action == "respond" else None
            if self._state.record:
                self._state.requests.append(Request(method, path, headers, body, probe.received_at, status))
            if self.track_runs and status is not None:
                answered = now + self.latency + reply.delay
                self._state.arrivals += [Arrival(r, t, now, answered) for r, t in _run_ids(body)]
        if self.validate and method == "POST" and status is not None and 200 <= status < 300:
            self._check(body)
        return reply

    def _decoded(self, headers: dict[str, str], body: bytes) -> bytes:
        """The body as sent before `Content-Encoding: gzip` (recorded and validated decoded)."""
        if headers.get("content-encoding", "").lower() != "gzip":
            return body
        try:
            return gzip.decompress(body)
        except (OSError, EOFError) as e:
            with self._lock:
                self._state.invalid.append(f"Content-Encoding: gzip, but the body is not gzip: {e}")
            return body

    def _check(self, body: bytes) -> None:
        try:
            if body.lstrip().startswith(b"["):  # the batch endpoint: an array of events
                for doc in json.loads(body):
                    self._validator.validate(doc)
            else:
                self._validator.validate(body)
        except (AssertionError, ValueError) as e:
            with self._lock:
                self._state.invalid.append(str(e)[:500])

    # -- results ---------------------------------------------------------------------------
    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._state.requests)

    @property
    def accepted(self) -> list[Request]:
        """Requests answered with a 2xx, in arrival order."""
        return [r for r in self.requests if r.status is not None and 200 <= r.status < 300]

    @property
    def invalid(self) -> list[str]:
        with self._lock:
            return list(self._state.invalid)

    @property
    def arrivals(self) -> list[Arrival]:
        """Every event answered so far (not hung or dropped), in arrival order (with track_runs)."""
        with self._lock:
            return list(self._state.arrivals)

    @property
    def count(self) -> int:
        with self._lock:
            return self._state.count

    def wait_for(self, predicate: Callable[[Receiver], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            time.sleep(0.05)
        return predicate(self)


def _run_ids(body: bytes) -> list[tuple[str, str]]:
    """(runId, eventType) of each event of a body (one event, or a batch array); ("?", "?") if unreadable."""
    try:
        doc = json.loads(body)
        docs = doc if isinstance(doc, list) else [doc]
        return [(str(d["run"]["runId"]), str(d.get("eventType", ""))) for d in docs]
    except (ValueError, TypeError, KeyError):
        return [("?", "?")]


def main(argv: list[str] | None = None) -> int:
    """Run a fast, non-recording, non-validating receiver as its own process (benchmarks).

    Prints {"port": N}; then each line "stats" on stdin prints {"count", "first", "last"}
    (request count and monotonic times of the first and last request) and resets them; with
    --track-runs, each line "runs" prints {"arrivals": [[runId, eventType, received_at,
    answered_at], ...]} (every event since the last "runs", in arrival order) and resets them.
    It stops when stdin closes.
    """
    parser = argparse.ArgumentParser(description="fast loopback OpenLineage receiver")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="fixed latency before every answer")
    parser.add_argument("--track-runs", action="store_true", help="record (runId, eventType) per event")
    args = parser.parse_args(argv)
    receiver = Receiver(
        args.port,
        validate=False,
        record=False,
        latency=args.latency_ms / 1000,
        track_runs=args.track_runs,
    ).start()
    sys.stdout.write(json.dumps({"port": receiver.port}) + "\n")
    sys.stdout.flush()
    try:
        for line in sys.stdin:
            if line.strip() == "stats":
                with receiver._lock:
                    state = receiver._state
                    doc = {"count": state.count, "first": state.first_at, "last": state.last_at}
                    state.count, state.first_at, state.last_at = 0, 0.0, 0.0
                sys.stdout.write(json.dumps(doc) + "\n")
                sys.stdout.flush()
            elif line.strip() == "runs":
                with receiver._lock:
                    arrivals, receiver._state.arrivals = receiver._state.arrivals, []
                sys.stdout.write(json.dumps({"arrivals": arrivals}) + "\n")
                sys.stdout.flush()
    finally:
        receiver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
