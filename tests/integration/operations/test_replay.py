"""`olstream replay` against a real broker: a time range of the lineage topic (message timestamps set
by the producer) reaches a fresh receiver whole and alone, a stopped replay goes on where it stopped
over the range fixed by its first run, a dry run counts, and the live sink's group is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from olstream.connectors.sink.bounds import decode_metadata
from tests.support.receiver import Receiver
from tests.support.sink_harness import ROOT

pytestmark = pytest.mark.integration

MakeTopic = Callable[..., str]
TYPES = ("START", "COMPLETE")


def event(run_id: str, kind: str, job: str = "job-a") -> bytes:
    doc = {
        "eventTime": "2026-01-01T00:00:00Z",
        "eventType": kind,
        "job": {"namespace": "replaytest", "name": job},
        "run": {"runId": run_id},
        "inputs": [],
        "outputs": [],
        "producer": "https://example.com/olstream-tests",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
    }
    return json.dumps(doc).encode()


def produce_at(
    bootstrap: str, topic: str, times_ms: list[int], partitions: int = 1, job: str = "job-a"
) -> list[str]:
    """One event per timestamp (run ids in order), round robin over the partitions; the run ids."""
    producer = Producer({"bootstrap.servers": bootstrap})
    run_ids = []
    for i, ms in enumerate(times_ms):
        run_id = str(uuid.uuid4())
        run_ids.append(run_id)
        producer.produce(
            topic,
            event(run_id, TYPES[i % 2], job),
            run_id.encode(),
            partition=i % partitions,
            timestamp=ms,
        )
    assert producer.flush(30) == 0
    return run_ids


def replay_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENLINEAGE_", "OLSTREAM_REPLAY_"))}
    env["PYTHONPATH"] = str(ROOT)
    return env


def replay_cmd(bootstrap: str, topic: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "olstream", "replay", "--bootstrap", bootstrap, "--topic", topic,
            "--commit-interval", "0.2", *args]  # fmt: skip


def replay(bootstrap: str, topic: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        replay_cmd(bootstrap, topic, *args),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env=replay_env(),
        cwd=ROOT,
    )


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def run_ids_of(bodies: list[bytes]) -> list[str]:
    return [json.loads(b)["run"]["runId"] for b in bodies]


def test_a_time_range_reaches_a_fresh_receiver_whole_and_alone(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str
) -> None:
    topic = make_topic(partitions=2)
    base = int(time.time() * 1000) - 600_000  # ten minutes ago, one event a second
    run_ids = produce_at(kafka_bootstrap, topic, [base + i * 1000 for i in range(30)], partitions=2)
    in_range = set(run_ids[10:20])  # since inclusive, until exclusive
    since, until = iso(base + 10_000), iso(base + 20_000)
    with Receiver(validate=False) as receiver:
        url = ("--url", receiver.url)
        dry = replay(kafka_bootstrap, topic, *url, "--since", since, "--until", until, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "would send 10 events" in dry.stdout and "COMPLETE 5, START 5" in dry.stdout, dry.stdout
        assert receiver.count == 0

        done = replay(kafka_bootstrap, topic, *url, "--since", since, "--until", until)
        assert done.returncode == 0, done.stderr
        delivered = run_ids_of([r.body for r in receiver.accepted])
        assert set(delivered) == in_range, (len(delivered), done.stdout, done.stderr)  # every one, no other
        assert "delivered 10 (COMPLETE 5, START 5)" in done.stdout, done.stdout
        assert "rolled back" in done.stderr  # the warning about receivers that hold newer events

        again = replay(kafka_bootstrap, topic, *url, "--since", since, "--until", until)
        assert again.returncode == 0, again.stderr
        assert "nothing left" in again.stdout, again.stdout
        assert len(receiver.accepted) == len(delivered)  # resumed at its end: nothing sent again

        one_job = replay(kafka_bootstrap, topic, *url, "--since", since, "--until", until, "--job", "job-b",
                         "--dry-run")  # fmt: skip
        assert one_job.returncode == 0 and "would send 0 events" in one_job.stdout, one_job.stdout

    live = replay(kafka_bootstrap, topic, "--console", "--group", "olstream-sink")
    assert live.returncode == 2
    assert live.stderr.count("\n") == 1 and "live sink" in live.stderr, live.stderr
    missing = replay(kafka_bootstrap, f"{topic}.missing", "--console", "--group", unique_group)
    assert missing.returncode == 2
    assert missing.stderr.strip().endswith("does not exist") and missing.stderr.count("\n") == 1
    after_all = iso(base + 60_000)
    empty = replay(kafka_bootstrap, topic, "--console", "--since", after_all, "--group", unique_group)
    assert empty.returncode == 2 and "no message" in empty.stderr and empty.stderr.count("\n") == 1
    backwards = replay(kafka_bootstrap, topic, "--console", "--since", until, "--until", since)
    assert backwards.returncode == 2 and "empty range" in backwards.stderr


def committed(bootstrap: str, group: str, topic: str) -> TopicPartition:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0]
    finally:
        consumer.close()


def test_a_stopped_replay_goes_on_where_it_stopped_over_the_range_of_its_first_run(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    now = int(time.time() * 1000)
    old = produce_at(kafka_bootstrap, topic, [now - 3_600_000 + i for i in range(5)])  # an hour ago
    in_range = produce_at(kafka_bootstrap, topic, [now - 300_000 + i * 1000 for i in range(20)])
    out = tmp_path / "replayed.ndjson"
    args = ("--file", str(out), "--since", "20m", "--rate", "8", "--group", unique_group)
    proc = subprocess.Popen(
        replay_cmd(kafka_bootstrap, topic, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=replay_env(),
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not out.exists() or len(out.read_bytes().splitlines()) < 5):
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "stopped" in stdout, stdout
    first_run = run_ids_of(out.read_bytes().splitlines())
    assert 5 <= len(first_run) < 20, (first_run, stdout)
    stopped_at = committed(kafka_bootstrap, unique_group, topic)
    stored = decode_metadata(stopped_at.metadata)
    assert stored is not None and stored[1] == 25, stopped_at.metadata  # the end when it started
    assert 5 < stopped_at.offset < 25

    later = produce_at(kafka_bootstrap, topic, [int(time.time() * 1000)] * 3)  # after the first run began
    second = replay(kafka_bootstrap, topic, *args)
    assert second.returncode == 0, second.stderr
    delivered = run_ids_of(out.read_bytes().splitlines())
    assert set(delivered) == set(in_range), (delivered, second.stdout)
    assert not set(delivered) & set(old + later)
    assert delivered.count(in_range[0]) == 1  # went on where it stopped, not from the beginning
    assert len(delivered) - len(first_run) <= 25 - stopped_at.offset
