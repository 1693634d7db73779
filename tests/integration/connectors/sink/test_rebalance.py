"""Two sinks in one group: partitions move during delivery; nothing lost, order kept, metrics served."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from olstream.devkit.process import free_port
from tests.support.receiver import Receiver, Reply
from tests.support.sink_events import make_events, produce
from tests.support.sink_harness import (
    assert_all_delivered_in_order,
    committed_total,
    start_sink,
    terminate,
)

pytestmark = pytest.mark.integration

MakeTopic = Callable[..., str]
METRICS = (
    "olstream_sink_delivered_total",
    "olstream_sink_retried_total",
    "olstream_sink_dead_lettered_total",
    "olstream_sink_backoff_seconds",
    "olstream_sink_in_flight",
    "olstream_sink_lag",
)


def test_partitions_moving_to_a_second_sink_lose_nothing_and_keep_order(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=4)
    events = make_events(runs=1500, events_per_run=3, jobs=150)
    produce(kafka_bootstrap, topic, events)
    port = free_port()
    slow = ("--concurrency", "2", "--dlq-topic", f"{topic}.dlq", "--commit-interval", "0.5")
    with Receiver(validate=False) as receiver:
        receiver.respond_with(lambda request, n: Reply(201, delay=0.004))  # slow enough to rebalance midway
        first = start_sink(
            kafka_bootstrap, topic, unique_group, "--url", receiver.url, "--metrics-port", str(port), *slow,
            log_path=tmp_path / "first.log",
        )  # fmt: skip
        second = None
        try:
            started = receiver.wait_for(lambda r: r.count >= 800, 60)
            assert started, (tmp_path / "first.log").read_text()[-3000:]
            second = start_sink(
                kafka_bootstrap, topic, unique_group, "--url", receiver.url, "--endpoint", "second/lineage",
                *slow, log_path=tmp_path / "second.log",
            )  # fmt: skip
            everything = {e.value for e in events}
            done = receiver.wait_for(lambda r: everything <= {q.body for q in r.accepted}, 120)
            assert done, (tmp_path / "second.log").read_text()[-3000:]
            time.sleep(1.5)  # a commit interval or two
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        finally:
            codes = [terminate(p) for p in (first, second) if p is not None]
        accepted = receiver.accepted
    assert codes == [0, 0]
    assert_all_delivered_in_order(events, accepted)
    by_second = [r for r in accepted if r.path == "/second/lineage"]
    assert 0 < len(by_second) < len(accepted), "the second sink must have taken over some partitions"
    first_log = (tmp_path / "first.log").read_text()
    assert "revoked" in first_log and "assigned" in (tmp_path / "second.log").read_text()
    assert committed_total(kafka_bootstrap, unique_group, topic) == len(events)
    for name in METRICS:
        assert f"\n{name} " in metrics or f"\n{name}{{" in metrics, name
    delivered = float(metrics.split("\nolstream_sink_delivered_total ")[1].split()[0])
    assert 800 <= delivered <= len(accepted)
