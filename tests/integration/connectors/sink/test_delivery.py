"""`olstream sink` against the conformance receiver and a real broker: delivery, order, DLQ, retries."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.receiver import Receiver, Reply, Request
from tests.support.sink_events import identity, make_events, produce
from tests.support.sink_harness import (
    assert_all_delivered_in_order,
    committed_total,
    job_version_repeats,
    run_sink,
    sink_command,
)
from tests.support.stop_support import committed_offsets
from tests.support.stream_support import Out, consume_all

pytestmark = pytest.mark.integration

MakeTopic = Callable[..., str]


def test_every_event_delivered_in_key_order_and_committed(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=4)
    events = make_events(runs=400, events_per_run=3, jobs=40)
    produce(kafka_bootstrap, topic, events)
    key_file = tmp_path / "key"
    key_file.write_text("s3cr3t-api-key-0123456789\n")
    log = tmp_path / "sink.log"
    with Receiver() as receiver:
        rc = run_sink(
            kafka_bootstrap, topic, unique_group, "--url", receiver.url, "--api-key-file", str(key_file),
            "--dlq-topic", f"{topic}.dlq", log_path=log,
        )  # fmt: skip
        accepted = receiver.accepted
        assert rc == 0, log.read_text()[-3000:]
        assert receiver.invalid == []
    assert_all_delivered_in_order(events, accepted)
    repeats, others, stale = job_version_repeats(accepted)  # the runs of a job go out concurrently
    assert others == 0 and len(accepted) == len(events) + repeats  # nothing failed: no other repeat
    assert stale == []  # every job's last terminal event received is its latest run's
    first = accepted[0]
    assert first.method == "POST" and first.path == "/api/v1/lineage"
    assert first.headers["content-type"] == "application/json"
    assert first.headers["authorization"] == "Bearer s3cr3t-api-key-0123456789"
    assert committed_total(kafka_bootstrap, unique_group, topic) == len(events)
    assert "s3cr3t-api-key" not in log.read_text()


def _dlq_headers(message: Out) -> dict[str, str]:
    return {k: v.decode() for k, v in message.headers}


def test_rejections_go_to_the_dlq_with_headers_and_the_rest_is_delivered(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    events = make_events(runs=60, events_per_run=3, jobs=6)
    produce(kafka_bootstrap, topic, events)
    rejected = {"sinktest/job-1": 422, "sinktest/job-2": 400, "sinktest/job-3": 413}

    def respond(request: Request, n: int) -> Reply:
        job, _run, kind = identity(request.body)
        if kind == "RUNNING" and job in rejected:
            status = rejected[job]
            return Reply(status, json.dumps({"error": f"no thanks ({status})", "pad": "x" * 3000}).encode())
        return Reply(201)

    dlq = f"{topic}.dlq"
    log = tmp_path / "sink.log"
    with Receiver() as receiver:
        receiver.respond_with(respond)
        rc = run_sink(
            kafka_bootstrap, topic, unique_group, "--url", receiver.url, "--dlq-topic", dlq, log_path=log
        )
        accepted = receiver.accepted
    assert rc == 0, log.read_text()[-3000:]
    expected_rejects = [
        e for e in events if identity(e.value)[2] == "RUNNING" and identity(e.value)[0] in rejected
    ]
    delivered = [e for e in events if e not in expected_rejects]
    assert_all_delivered_in_order(delivered, accepted)
    dead = consume_all(kafka_bootstrap, dlq, expect=len(expected_rejects), idle=0.5)
    assert len(dead) == len(expected_rejects)
    assert {m.value for m in dead} == {e.value for e in expected_rejects}
    for m in dead:
        headers = _dlq_headers(m)
        job = identity(m.value)[0]
        assert headers["olstream.status"] == str(rejected[job])
        assert headers["olstream.response"].startswith('{"error": "no thanks')
        assert len(headers["olstream.response"].encode()) <= 1024
        assert headers["olstream.source.topic"] == topic
        assert int(headers["olstream.source.partition"]) in (0, 1)
        assert int(headers["olstream.source.offset"]) >= 0
        assert m.key == f"run:{job}".encode()
    assert committed_total(kafka_bootstrap, unique_group, topic) == len(events)
    text = log.read_text()
    assert text.count("dead-lettered to") == len(expected_rejects)  # logged once each
    for status in set(rejected.values()):  # with the status and the first bytes of the body
        assert f'with HTTP {status} ({{"error": "no thanks ({status})"' in text


def test_retriable_answers_hangs_drops_and_misconfiguration_are_retried_without_loss(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    events = make_events(runs=100, events_per_run=3, jobs=10)
    produce(kafka_bootstrap, topic, events)
    log = tmp_path / "sink.log"
    with Receiver() as receiver:
        receiver.script(
            Reply(429, headers=(("Retry-After", "1"),)),
            Reply(500),
            Reply(503, headers=(("Retry-After", "Thu, 01 Jan 1970 00:00:00 GMT"),)),
            Reply.drop(),
            Reply.hang(),
            Reply(401, b"bad key"),
            Reply(404),
            Reply(201),
            Reply(503),
        )
        rc = run_sink(
            kafka_bootstrap, topic, unique_group, "--url", receiver.url, "--http-timeout", "1",
            "--max-backoff", "1", "--concurrency", "1", "--dlq-topic", f"{topic}.dlq", log_path=log,
        )  # fmt: skip
        accepted = receiver.accepted
        statuses = [r.status for r in receiver.requests[:9]]
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert statuses == [429, 500, 503, None, None, 401, 404, 201, 503]
    assert_all_delivered_in_order(events, accepted)
    assert "CONFIGURATION PROBLEM" in text and "HTTP 401" in text and "HTTP 404" in text
    assert "dead-lettered to" not in text
    assert consume_all(kafka_bootstrap, f"{topic}.dlq", idle=3.0) == []


def test_file_and_dry_run_transports(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    events = make_events(runs=50, events_per_run=2, jobs=5)
    produce(kafka_bootstrap, topic, events)
    log = tmp_path / "dry.log"
    nowhere = "http://127.0.0.1:9/"
    rc = run_sink(kafka_bootstrap, topic, unique_group, "--url", nowhere, "--dry-run", log_path=log)
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert text.count("would send") == len(events)
    assert "http://127.0.0.1:9/api/v1/lineage" in text
    assert committed_offsets(kafka_bootstrap, unique_group, topic) == [-1001, -1001]  # nothing committed

    out = tmp_path / "events.ndjson"
    rc = run_sink(
        kafka_bootstrap, topic, unique_group, "--file", str(out), "--dlq-topic", f"{topic}.dlq", log_path=log
    )
    assert rc == 0, log.read_text()[-3000:]
    lines = out.read_bytes().splitlines()
    assert sorted(lines) == sorted(e.value for e in events)
    assert committed_total(kafka_bootstrap, unique_group, topic) == len(events)


def test_console_prints_one_event_per_line_and_an_empty_topic_is_idle_at_once(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str
) -> None:
    empty = make_topic(partitions=1)
    done = subprocess.run(
        sink_command(
            kafka_bootstrap, empty, unique_group, "--console", "--until-idle", "--dlq-topic", f"{empty}.dlq"
        ),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout == b"", done.stderr.decode()[-2000:]

    topic = make_topic(partitions=2)
    events = make_events(runs=30, events_per_run=2, jobs=3)
    produce(kafka_bootstrap, topic, events)
    done = subprocess.run(
        sink_command(
            kafka_bootstrap, topic, unique_group, "--console", "--until-idle", "--dlq-topic", f"{topic}.dlq"
        ),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert sorted(done.stdout.splitlines()) == sorted(e.value for e in events)
    assert committed_total(kafka_bootstrap, unique_group, topic) == len(events)


def test_until_idle_ends_on_a_topic_written_in_transactions_and_delivers_only_committed_events(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str
) -> None:
    """The worker's output under `exactly_once` is written in transactions: each partition ends in a
    commit marker, which no consumer is given, and an aborted transaction's events lie in between.
    `--until-idle` still ends, and the sink (read_committed) delivers the committed events only."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = make_topic(partitions=2)
    committed = make_events(runs=20, events_per_run=2, jobs=3)
    aborted = make_events(runs=5, events_per_run=2, jobs=2, namespace="aborted")
    tx = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{unique_group}.tx"})
    tx.init_transactions(30)
    for records, commit in ((committed[:20], True), (aborted, False), (committed[20:], True)):
        tx.begin_transaction()
        for rec in records:
            tx.produce(topic, rec.value, rec.key, headers=list(rec.headers))
        if commit:
            tx.commit_transaction(30)
        else:
            tx.abort_transaction(30)
    done = subprocess.run(
        sink_command(
            kafka_bootstrap, topic, unique_group, "--console", "--until-idle", "--dlq-topic", f"{topic}.dlq"
        ),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert sorted(done.stdout.splitlines()) == sorted(e.value for e in committed)
    # the group's commits pass the markers too: its lag is 0, as `olstream status` and the alerts read it
    probe = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_group})
    ends = [probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(2)]
    probe.close()
    assert [max(0, o) for o in committed_offsets(kafka_bootstrap, unique_group, topic)] == ends
    assert sum(ends) > len(committed)  # the markers and the aborted events are in the offsets
