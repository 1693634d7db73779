"""Faults: a 60 s receiver outage plus a hanging receiver, and kill -9 of the sink during delivery."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.openlineage_schema import validator
from tests.support.receiver import Receiver, Reply
from tests.support.sink_events import make_events, produce
from tests.support.sink_harness import (
    assert_all_delivered_in_order,
    committed_total,
    run_sink,
    start_sink,
    terminate,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MakeTopic = Callable[..., str]
OUTAGE_SECONDS = 60


def distinct(receiver: Receiver) -> int:
    """Distinct event bodies the receiver accepted."""
    return len({r.body for r in receiver.accepted})


def test_a_60_second_outage_and_a_hanging_receiver_are_recovered_without_loss(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=4)
    before, during = make_events(runs=300, jobs=30), make_events(runs=300, jobs=30, namespace="outage")
    produce(kafka_bootstrap, topic, before)
    log = tmp_path / "sink.log"
    with Receiver() as receiver:
        sink = start_sink(
            kafka_bootstrap, topic, unique_group, "--url", receiver.url, "--http-timeout", "2",
            "--max-backoff", "5", "--max-buffered", "200", "--dlq-topic", f"{topic}.dlq", log_path=log,
        )  # fmt: skip
        try:
            # distinct bodies: the sink may post a job's latest terminal event twice (sink.md, Job versions)
            assert receiver.wait_for(lambda r: distinct(r) >= len(before), 60), log.read_text()[-3000:]
            receiver.stop()  # outage: connections refused
            outage_began = time.monotonic()
            produce(kafka_bootstrap, topic, during)  # arrives while the receiver is down
            time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - outage_began)))
            assert sink.poll() is None, "the sink must ride out the outage"
            attempts_during_outage = log.read_text().count("retrying in")
            receiver.script(Reply.hang(), Reply.hang(), Reply.hang())  # back, but hanging at first
            receiver.start()
            everything = before + during
            delivered = receiver.wait_for(lambda r: distinct(r) >= len(everything), 90)
            assert delivered, log.read_text()[-3000:]
            time.sleep(1.5)  # one commit interval
        finally:
            rc = terminate(sink)
        accepted = receiver.accepted
        assert receiver.invalid == []
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert_all_delivered_in_order(everything, accepted)
    assert 3 <= attempts_during_outage <= 40, "backoff between attempts, not a hot loop"
    assert "TimeoutError" in text or "timeout" in text.lower()  # the hangs cost one timeout each
    assert "pausing consumption (backing off" in text
    assert committed_total(kafka_bootstrap, unique_group, topic) == len(everything)


def test_kill_9_five_times_during_delivery_of_20000_events_loses_nothing(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=4)
    events = make_events(runs=5000, events_per_run=4, jobs=400)
    assert len(events) == 20000
    produce(kafka_bootstrap, topic, events)
    log = tmp_path / "sink.log"
    instance = f"sink-{uuid.uuid4().hex[:8]}"  # static membership: a restart takes over at once
    kills = []
    with Receiver(validate=False) as receiver:
        args = ["--url", receiver.url, "--instance-id", instance, "--dlq-topic", f"{topic}.dlq"]
        args += ["--commit-interval", "0.5"]
        for _ in range(5):
            sink = start_sink(kafka_bootstrap, topic, unique_group, *args, log_path=log)
            threshold = receiver.count + 2500  # let it deliver a while, then kill it mid-flight
            try:
                assert receiver.wait_for(lambda r, t=threshold: r.count >= t, 60), log.read_text()[-3000:]
            finally:
                os.kill(sink.pid, signal.SIGKILL)
                sink.wait()
            kills.append(receiver.count)
        rc = run_sink(kafka_bootstrap, topic, unique_group, *args, log_path=log, timeout=180)
        accepted = receiver.accepted
    assert rc == 0, log.read_text()[-3000:]
    assert len(kills) == 5 and kills[-1] < len(events), f"kills must land during delivery: {kills}"
    assert_all_delivered_in_order(events, accepted)  # nothing lost, repeats byte-identical, order kept
    repeats = sum(n - 1 for n in Counter(r.body for r in accepted).values())
    assert repeats < len(events)
    print(f"kill -9 after {kills} requests; {len(accepted)} accepted, {repeats} repeats")
    assert committed_total(kafka_bootstrap, unique_group, topic) == len(events)
    check = validator()
    for body in [e.value for e in events[::500]]:
        check.validate(body)
