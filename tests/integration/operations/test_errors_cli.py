"""`olstream errors list | show` against a real broker: it sums up and prints error records, a
transactional topic's end included, and moves no consumer group."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from olstream.shared import deadletter

pytestmark = pytest.mark.integration


def olstream(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "olstream", *args, "--bootstrap", bootstrap],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_list_show_and_raw_over_real_error_topics(
    kafka_bootstrap: str, make_topic: Callable[..., str], unique_group: str, tmp_path: Path
) -> None:
    dlq = make_topic(partitions=2)
    errors = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(3):
        producer.produce(
            dlq,
            value=b'{"eventType":"START"}',
            partition=i % 2,
            headers=[(deadletter.ERROR, b"rejected"), (deadletter.HTTP_STATUS, b"400")],
            timestamp=1_700_000_000_000 + i,
        )
    big = b"\x00" * (deadletter.COPY_LIMIT + 10)
    copy, whole = deadletter.bounded_copy(big)
    producer.produce(dlq, value=copy, partition=0, headers=[(deadletter.ERROR, b"retries_exhausted"), *whole])
    assert producer.flush(30) == 0
    tx = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{unique_group}.tx"})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce(
        errors,
        value=b"\x00\x01bad\nrecord",
        headers=[(deadletter.ERROR, b"undecodable"), ("olstream.partition", b"3"), ("olstream.offset", b"9")],
    )
    tx.commit_transaction(30)  # the topic now ends in a commit marker no consumer is given
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_group})
    try:
        consumer.commit(offsets=[TopicPartition(dlq, 0, 1)], asynchronous=False)
    finally:
        consumer.close()

    listed = olstream(kafka_bootstrap, "errors", "list", "--topic", dlq, "--topic", errors)
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if dlq in line or errors in line]
    first_time = "2023-11-14T22:13:20.000Z"
    assert any("rejected" in r and " 3 " in r and first_time in r for r in rows), listed.stdout
    assert any("retries_exhausted" in r and r.rstrip(" │|").endswith("1") for r in rows), listed.stdout
    assert any("undecodable" in r for r in rows), listed.stdout

    shown = olstream(kafka_bootstrap, "errors", "show", errors, "--reason", "undecodable")
    assert shown.returncode == 0, shown.stderr
    assert "event log position: partition 3, offset 9" in shown.stdout
    assert "payload (12 bytes, whole): \\x00\\x01bad\\nrecord" in shown.stdout

    raw = tmp_path / "payload.bin"
    cut = olstream(kafka_bootstrap, "errors", "show", dlq, "--reason", "retries_exhausted", "--raw", str(raw))
    assert cut.returncode == 0, cut.stderr
    assert raw.read_bytes() == copy
    assert f"cut to its first {deadletter.COPY_LIMIT} bytes" in cut.stdout
    assert "not re-drivable from this copy" in cut.stdout

    # a time range selects by the messages' timestamps: only the second of the three
    timed = olstream(
        kafka_bootstrap, "errors", "show", dlq,
        "--since", "2023-11-14T22:13:20.001Z", "--until", "2023-11-14T22:13:20.002Z",
    )  # fmt: skip
    assert timed.returncode == 0, timed.stderr
    assert "2023-11-14T22:13:20.001Z" in timed.stdout, timed.stdout
    assert "20.000Z" not in timed.stdout and "20.002Z" not in timed.stdout, timed.stdout
    assert "more records match" not in timed.stdout, timed.stdout
    bad_time = olstream(kafka_bootstrap, "errors", "show", dlq, "--since", "yesterday")
    assert bad_time.returncode == 2 and len(bad_time.stderr.strip().splitlines()) == 1, bad_time.stderr

    many = olstream(kafka_bootstrap, "errors", "show", dlq, "--raw", str(raw))
    assert many.returncode == 2 and "4 match" in many.stderr

    # nothing moved the group
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_group})
    try:
        (tp0, tp1) = consumer.committed([TopicPartition(dlq, 0), TopicPartition(dlq, 1)], timeout=30)
    finally:
        consumer.close()
    assert (tp0.offset, tp1.offset) == (1, -1001)


def test_a_missing_topic_is_one_line_and_exit_2(kafka_bootstrap: str) -> None:
    done = olstream(kafka_bootstrap, "errors", "list", "--topic", "olstream-errors-no-such-topic")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "olstream errors list: topic olstream-errors-no-such-topic does not exist"
    ], done.stderr


def test_the_default_list_names_each_error_topic_whether_it_exists_or_not(kafka_bootstrap: str) -> None:
    """A source with its own --topic has its errors in <topic>.errors: a default topic that does not
    exist is a row of the list, not the end of it."""
    done = olstream(kafka_bootstrap, "errors", "list")
    assert done.returncode == 0, done.stderr
    for name in ("olstream.eventlog.errors", "olstream.stream.errors", "openlineage.events.dlq"):
        assert any(name in line for line in done.stdout.splitlines()), done.stdout
