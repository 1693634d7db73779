"""The test receiver's benchmark options: a fixed latency that does not block other connections,
and per-event (runId, eventType) tracking; also as its own process (`python -m tests.support.receiver`)."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time

from tests.support.paths import REPO
from tests.support.receiver import Receiver, Reply


def post(port: int, body: bytes) -> float:
    """POST one body on a fresh connection; the seconds until the answer."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/api/v1/lineage", body, {"Content-Type": "application/json"})
        assert conn.getresponse().status == 201
    finally:
        conn.close()
    return time.monotonic() - started


def event(run_id: str, kind: str) -> bytes:
    return json.dumps({"eventType": kind, "run": {"runId": run_id}}).encode()


def test_latency_delays_each_answer_without_blocking_other_connections() -> None:
    with Receiver(validate=False, latency=0.3) as receiver:
        took: list[float] = []

        def send(body: bytes) -> None:
            took.append(post(receiver.port, body))

        threads = [threading.Thread(target=send, args=(event(str(i), "START"),)) for i in range(8)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = time.monotonic() - started
    assert len(took) == 8 and min(took) >= 0.29
    assert total < 8 * 0.3 / 2  # concurrent, not one after the other


def test_no_latency_by_default_and_arrivals_only_when_tracking() -> None:
    with Receiver(validate=False) as receiver:
        assert post(receiver.port, event("a", "START")) < 0.25
        assert receiver.arrivals == []


def test_track_runs_records_single_and_batch_bodies_in_arrival_order() -> None:
    with Receiver(validate=False, track_runs=True, latency=0.05) as receiver:
        receiver.script(Reply(201, delay=0.1))
        before = time.monotonic()
        post(receiver.port, event("a", "START"))
        batch = b"[" + event("b", "START") + b"," + event("a", "COMPLETE") + b"]"
        post(receiver.port, batch)
        post(receiver.port, b"not json")
        after = time.monotonic()
        arrivals = receiver.arrivals
    assert [(a.run_id, a.event_type) for a in arrivals] == [
        ("a", "START"),
        ("b", "START"),
        ("a", "COMPLETE"),
        ("?", "?"),
    ]
    assert before <= arrivals[0].received_at <= arrivals[1].received_at <= after
    assert abs(arrivals[0].answered_at - arrivals[0].received_at - 0.15) < 1e-6  # latency + reply delay
    assert arrivals[1].received_at == arrivals[2].received_at  # one request
    assert abs(arrivals[1].answered_at - arrivals[1].received_at - 0.05) < 1e-6


def test_process_mode_latency_and_runs_command() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.receiver", "--latency-ms", "200", "--track-runs"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=REPO,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        port = json.loads(proc.stdout.readline())["port"]
        assert post(port, event("r1", "START")) >= 0.19
        post(port, event("r1", "COMPLETE"))
        proc.stdin.write("stats\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["count"] == 2
        for expected in ([["r1", "START"], ["r1", "COMPLETE"]], []):  # "runs" resets
            proc.stdin.write("runs\n")
            proc.stdin.flush()
            got = json.loads(proc.stdout.readline())["arrivals"]
            assert [[r, t] for r, t, _, _ in got] == expected
            assert all(abs(answered - received - 0.2) < 1e-6 for _, _, received, answered in got)
    finally:
        proc.stdin.close()
        proc.wait(10)
