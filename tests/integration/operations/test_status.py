"""`olstream status` against a real broker: end offsets and a group's lag; its output holds its
tables and its own log lines only, never a raw librdkafka line."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from olstream.operations.status import collect

pytestmark = pytest.mark.integration


def test_end_offsets_and_lag_of_a_group(
    kafka_bootstrap: str, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce(topic, value=b"x", partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    finally:
        consumer.close()

    status = collect(kafka_bootstrap, (topic, "olstream-status-missing-topic"))

    (ends,) = status.topics
    assert (ends.topic, ends.partitions, ends.end_offsets) == (topic, 2, (3, 2))
    assert status.missing_topics == ("olstream-status-missing-topic",)
    (lag,) = [g for g in status.groups if g.group == unique_group]
    assert (lag.committed, lag.end, lag.lag, lag.partitions_without_commit) == (2, 5, 3, 1)
    state = status.state_of(unique_group)
    assert state is not None and state.members == 0
    rows = [r for r in status.partitions if r.group == unique_group]
    assert [(r.partition, r.end, r.committed, r.lag, r.owner) for r in rows] == [
        (0, 3, 2, 1, None),
        (1, 2, -1, 2, None),
    ]


def test_each_partition_shows_the_member_that_owns_it(
    kafka_bootstrap: str, make_topic: Callable[..., str], unique_group: str
) -> None:
    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(3):
        producer.produce(topic, value=b"x", partition=i % 2)
    assert producer.flush(30) == 0
    consumers = [
        Consumer(
            {
                "bootstrap.servers": kafka_bootstrap,
                "group.id": unique_group,
                "client.id": f"status-owner-{i}",
                "partition.assignment.strategy": "range",
            }
        )
        for i in range(2)
    ]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while not all(c.assignment() for c in consumers):  # the group is stable, one partition each
            assert time.monotonic() < deadline, "the group did not settle"
            for consumer in consumers:
                consumer.poll(0.1)
        held = {c.assignment()[0].partition: f"status-owner-{i}" for i, c in enumerate(consumers)}

        status = collect(kafka_bootstrap, (topic,))

        rows = [r for r in status.partitions if r.group == unique_group]
        assert [(r.partition, r.end) for r in rows] == [(0, 2), (1, 1)]
        assert [r.owner.split("@")[0] if r.owner else None for r in rows] == [held[0], held[1]]
        state = status.state_of(unique_group)
        assert state is not None and (state.state, state.members) == ("STABLE", 2)
    finally:
        for consumer in consumers:
            consumer.close()


RAW_LIBRDKAFKA_LINE = re.compile(
    r"^%\d+\|", re.MULTILINE
)  # %6|1796215723.386|BGQUEUE|rdkafka#producer-2| ...
OWN_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (WARNING|ERROR|CRITICAL) [\w.]+: ")


def test_status_prints_its_tables_and_its_own_lines_but_no_librdkafka_line(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    unique_group: str,
    olstream_cmd: list[str],
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, value=b"x", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    # A consumer property in the shared client file (meant for the sink's or the worker's consumer):
    # librdkafka warns about it (CONFWARN) in every admin client status creates. And a group to
    # describe: describe_consumer_groups right before the client's end left an event unserved in some
    # runs, and librdkafka printed "BGQUEUE ... Purging 1 unserved events from background queue".
    client_file = tmp_path / "client.properties"
    client_file.write_text("session.timeout.ms=45000\n")
    cmd = [*olstream_cmd, "status", "--bootstrap", kafka_bootstrap, "--kafka-config", str(client_file)]
    env = {**subprocess_env, "COLUMNS": "400"}  # rich's tables, wide enough for the generated names
    for _ in range(3):
        run = subprocess.run(
            [*cmd, "--topic", topic], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert run.returncode == 0, run.stderr
        assert not RAW_LIBRDKAFKA_LINE.search(run.stdout), run.stdout
        assert not RAW_LIBRDKAFKA_LINE.search(run.stderr), run.stderr
        assert "Topics at" in run.stdout and "Consumer groups" in run.stdout
        assert topic in run.stdout and unique_group in run.stdout
        assert all(OWN_LOG_LINE.match(line) for line in run.stderr.splitlines()), run.stderr
        # librdkafka's warning reached status's logging, as one of its own lines
        assert "WARNING librdkafka: CONFWARN" in run.stderr and "session.timeout.ms" in run.stderr
