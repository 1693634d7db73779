"""`olstream_sink_lag` before the group's first commit: the events waiting, not 0 because the sink
read them ahead; then 0 once they are delivered and committed."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from olstream.devkit.process import free_port
from tests.support.receiver import Receiver, Reply
from tests.support.sink_events import make_events, produce
from tests.support.sink_harness import committed_total, start_sink, terminate
from tests.support.stop_support import committed_offsets

pytestmark = pytest.mark.integration

MakeTopic = Callable[..., str]


def lag(port: int) -> float | None:
    """The gauge as /metrics serves it (None while the sink is not serving yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    return float(text.split("\nolstream_sink_lag ")[1].split()[0])


def wait_for_lag(port: int, expected: float, timeout: float) -> tuple[bool, float | None]:
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        seen = lag(port)
        if seen == expected:
            return True, seen
        time.sleep(0.2)
    return False, seen


def test_lag_counts_every_waiting_event_before_the_first_commit_and_is_zero_after(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=3)
    events = make_events(runs=200, events_per_run=3, jobs=20)
    produce(kafka_bootstrap, topic, events)
    port = free_port()
    log = tmp_path / "sink.log"
    with Receiver(validate=False) as receiver:
        receiver.respond_with(lambda request, n: Reply(503))  # down: nothing is delivered or committed
        proc = start_sink(
            kafka_bootstrap, topic, unique_group, "--url", receiver.url, "--metrics-port", str(port),
            "--max-backoff", "1", "--commit-interval", "0.2", "--dlq-topic", f"{topic}.dlq", log_path=log,
        )  # fmt: skip
        try:
            assert receiver.wait_for(lambda r: r.count >= 3, 60), log.read_text()[-3000:]  # it has fetched
            ok, seen = wait_for_lag(port, len(events), 30)
            assert ok, f"lag {seen}, {len(events)} events waiting\n{log.read_text()[-3000:]}"
            assert committed_offsets(kafka_bootstrap, unique_group, topic) == [-1001] * 3

            more = make_events(runs=30, events_per_run=2, jobs=5, namespace="later")
            produce(kafka_bootstrap, topic, more)  # arrive while the sink is paused, backing off
            ok, seen = wait_for_lag(port, len(events) + len(more), 30)
            assert ok, f"lag {seen}, {len(events) + len(more)} waiting\n{log.read_text()[-3000:]}"

            receiver.respond_with(lambda request, n: Reply(201))  # back: everything goes, is committed
            ok, seen = wait_for_lag(port, 0, 60)
            assert ok, f"lag {seen} after delivery\n{log.read_text()[-3000:]}"
            assert committed_total(kafka_bootstrap, unique_group, topic) == len(events) + len(more)
        finally:
            rc = terminate(proc)
    assert rc == 0, log.read_text()[-3000:]
