"""A poison event never stalls the rest, and two receivers are isolated (real sinks, real broker)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from olstream.contract import topics
from olstream.shared import deadletter
from tests.support.receiver import Receiver, Reply, Request
from tests.support.sink_events import LineageRecord, make_events, produce, run_order
from tests.support.sink_harness import assert_all_delivered_in_order, run_sink, start_sink, terminate

pytestmark = pytest.mark.integration

MakeTopic = Callable[..., str]
OUTAGE_SECONDS = 60


def run_id(body: bytes) -> str:
    return str(json.loads(body)["run"]["runId"])


def arrivals(requests: list[Request]) -> list[tuple[str, str]]:
    return [(run_id(r.body), json.loads(r.body)["eventType"]) for r in requests]


def read_dlq(
    bootstrap: str, topic: str, expect: int, timeout: float = 30.0
) -> list[tuple[bytes, dict[str, bytes]]]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"dlq-{time.time_ns()}", "auto.offset.reset": "earliest"}
    )
    c.subscribe([topic])
    out: list[tuple[bytes, dict[str, bytes]]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(out) < expect:
            for m in c.consume(100, 0.5):
                if m.error() is None:
                    out.append((m.value() or b"", dict(m.headers() or [])))
        time.sleep(0.5)
        out.extend(
            (m.value() or b"", dict(m.headers() or [])) for m in c.consume(100, 1.0) if m.error() is None
        )
    finally:
        c.close()
    return out


def test_a_poison_event_is_dead_lettered_after_the_retry_timeout_while_the_rest_flows(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    """The receiver answers 500 to one event forever (DataHub does for events it cannot map)."""
    topic, dlq = make_topic(partitions=3), make_topic(partitions=3)
    events = make_events(runs=200, events_per_run=2, jobs=3)  # 3 root jobs: hot keys
    poison = events[17].value
    produce(kafka_bootstrap, topic, events)
    with Receiver() as receiver:
        receiver.respond_with(lambda req, n: Reply(500, b"cannot map") if req.body == poison else Reply(201))
        started = time.monotonic()
        rc = run_sink(
            kafka_bootstrap, topic, unique_group, "--url", receiver.url, "--dlq-topic", dlq,
            "--retry-timeout", "5", "--max-backoff", "1", log_path=tmp_path / "sink.log",
        )  # fmt: skip
        elapsed = time.monotonic() - started
        log = (tmp_path / "sink.log").read_text()
        assert rc == 0, log[-3000:]
        accepted = receiver.accepted
        poison_attempts = sum(1 for r in receiver.requests if r.body == poison)
    others = [e for e in events if e.value != poison]
    assert_all_delivered_in_order(others, accepted)
    # per-run order held for every run; the poison's run has its terminal event without its START
    order = run_order(a for a in arrivals(accepted) if a[0] != run_id(poison))
    assert order.out_of_order == 0 and order.incomplete == 0
    [(value, headers)] = read_dlq(kafka_bootstrap, dlq, expect=1)
    assert value == poison
    assert headers[deadletter.ERROR] == deadletter.RETRIES_EXHAUSTED.encode()
    assert headers[deadletter.HTTP_STATUS] == b"500" and headers[deadletter.HTTP_RESPONSE] == b"cannot map"
    assert poison_attempts > 2 and 5 <= elapsed < 60, (poison_attempts, elapsed)
    # the poison's run was held back (its later events wait behind it), every other run flowed
    assert "gave up on" in log


def distinct(receiver: Receiver) -> int:
    """Distinct event bodies the receiver accepted."""
    return len({r.body for r in receiver.accepted})


def test_two_receivers_each_with_its_own_sink_group_and_dlq_are_isolated(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    """Receiver B is down for 60 s: A keeps receiving everything meanwhile; afterwards both have all."""
    topic = make_topic(partitions=3)
    before = make_events(runs=150, events_per_run=2, jobs=5)
    during = make_events(runs=150, events_per_run=2, jobs=5, namespace="during")
    produce(kafka_bootstrap, topic, before)
    with Receiver() as a, Receiver() as b:
        b_down = {"until": time.monotonic() + OUTAGE_SECONDS}
        b.respond_with(lambda req, n: Reply(503) if time.monotonic() < b_down["until"] else Reply(201))
        sinks = []
        for name, r in (("a", a), ("b", b)):
            extra = ["--url", r.url, "--dlq-topic", make_topic(partitions=3), "--max-backoff", "2"]
            log = tmp_path / f"sink-{name}.log"
            sinks.append(start_sink(kafka_bootstrap, topic, f"{unique_group}-{name}", *extra, log_path=log))
        try:
            time.sleep(5)
            produce(kafka_bootstrap, topic, during)
            everything = len(before) + len(during)
            # distinct bodies: the sink may post a job's latest terminal event twice (sink.md, Job versions)
            assert a.wait_for(lambda r: distinct(r) >= everything, timeout=OUTAGE_SECONDS - 15), (
                f"A got {distinct(a)} of {everything} while B was down"
            )
            assert time.monotonic() < b_down["until"], "A was only complete after B's outage"
            assert b.accepted == [], "B accepted events during its outage"
            assert b.wait_for(lambda r: distinct(r) >= everything, timeout=OUTAGE_SECONDS + 60), (
                f"B got {distinct(b)} of {everything} after its outage"
            )
        finally:
            codes = [terminate(s) for s in sinks]
        assert codes == [0, 0]
        for r in (a, b):
            assert_all_delivered_in_order(before + during, r.accepted)
            assert run_order(arrivals(r.accepted)).out_of_order == 0


def test_a_rejected_event_as_large_as_the_topic_accepts_is_dead_lettered(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_topic: str, unique_group: str, tmp_path: Path
) -> None:
    """An event above librdkafka's and the broker's default message sizes (1,000,000 and 1,048,588
    bytes), on a topic sized as the worker sizes its output: the DLQ the sink creates takes it too."""
    topic = make_topic(partitions=1, config=topics.size_config(topics.MAX_MESSAGE_BYTES))
    small = make_events(runs=3, events_per_run=2, jobs=1)
    doc = json.loads(small[0].value)
    doc["run"]["facets"]["padding"] = {"text": "x" * 1_080_000}
    large = LineageRecord(small[0].key, json.dumps(doc).encode())
    events = [large, *small[1:]]
    sized = topics.producer_size_config(topics.MAX_MESSAGE_BYTES)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **sized})
    for e in events:
        producer.produce(topic, e.value, e.key)
    assert producer.flush(60) == 0
    with Receiver() as receiver:
        receiver.respond_with(lambda req, n: Reply(400, b"no") if req.body == large.value else Reply(201))
        rc = run_sink(
            kafka_bootstrap, topic, unique_group, "--url", receiver.url, "--dlq-topic", unique_topic,
            log_path=tmp_path / "sink.log",
        )  # fmt: skip
        assert rc == 0, (tmp_path / "sink.log").read_text()[-3000:]
        assert_all_delivered_in_order(small[1:], receiver.accepted)
    [(value, headers)] = read_dlq(kafka_bootstrap, unique_topic, expect=1)
    assert value == large.value and len(value) > 1_048_588
    assert headers[deadletter.ERROR] == deadletter.REJECTED.encode()
