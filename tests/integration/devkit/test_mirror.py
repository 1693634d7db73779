"""MirrorMaker 2 between two real single-node clusters: every record arrives, in order, across a kill -9.

Two brokers of their own (the session broker stays out of it), a topic on A per test; `start_mirror`
replicates it into B, keys, values and headers intact and in order per partition. A kill -9 in the
middle of a stream of records repeats what followed MirrorMaker 2's last committed position
(`offset_flush_interval_ms`), never loses a record: the duplicates are counted and printed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from olstream.devkit import kafka
from olstream.devkit.kafka_config import DEFAULT_KAFKA_VERSION, KafkaSettings
from olstream.devkit.mirror import mirror_status, start_mirror, stop_mirror
from olstream.devkit.mirror_config import DEFAULT_MIRROR_VERSION, MirrorSettings
from olstream.devkit.process import free_port, pid_alive
from olstream.shared.errors import InfrastructureError
from olstream.shared.kafka_admin import ensure_topic, topic_partitions

pytestmark = pytest.mark.integration

PARTITIONS = 3
Record = tuple[bytes, bytes, bytes]  # key, value, the olstream.seq header


def _start_broker(data_dir: Path) -> str:
    for attempt in range(3):
        port = free_port()
        settings = KafkaSettings(
            version=os.environ.get("OLSTREAM_KAFKA_VERSION", DEFAULT_KAFKA_VERSION),
            port=port,
            controller_port=free_port(avoid=frozenset({port})),
            data_dir=data_dir,
        )
        try:
            return kafka.start_broker(settings)[0].bootstrap
        except InfrastructureError as e:
            if "already in use" not in str(e) or attempt == 2:
                raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[str, str]]:
    """(bootstrap of A, bootstrap of B): two single-node clusters, stopped when the module ends."""
    dirs = [Path(tempfile.mkdtemp(prefix=f"olstream-mirror-{name}-")) for name in "ab"]
    try:
        with ThreadPoolExecutor(2) as pool:  # both at once: about 8 s less than one after the other
            a, b = pool.map(_start_broker, dirs)
        yield a, b
    finally:
        for d in dirs:
            kafka.stop_broker(d)
            shutil.rmtree(d, ignore_errors=True)


def _topic(prefix: str = "olstream.eventlog") -> str:
    return f"{prefix}.{uuid.uuid4().hex[:8]}"


class Source:
    """Produces numbered records to explicit partitions of a topic on A; remembers each partition's order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        self.sent: dict[int, list[Record]] = {p: [] for p in range(PARTITIONS)}
        self.count = 0

    def send(self, n: int, batch: str, per_second: float | None = None) -> None:
        started = time.monotonic()
        for k in range(n):
            i = self.count
            partition = i % PARTITIONS
            record = (
                f"run-{i % 17}".encode(),
                json.dumps({"batch": batch, "i": i}).encode(),
                str(i).encode(),
            )
            self.producer.produce(
                self.topic,
                key=record[0],
                value=record[1],
                partition=partition,
                headers={"olstream.seq": record[2]},
            )
            self.sent[partition].append(record)
            self.count += 1
            self.producer.poll(0)
            if per_second and (delay := started + (k + 1) / per_second - time.monotonic()) > 0:
                time.sleep(delay)
        assert self.producer.flush(30) == 0


class Target:
    """Reads the copy of a topic on B from its beginning, per partition."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"check-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
            }
        )
        self.got: dict[int, list[Record]] = {p: [] for p in range(PARTITIONS)}
        self.assigned = False

    def total(self) -> int:
        return sum(len(v) for v in self.got.values())

    def distinct(self) -> int:
        return len({r for v in self.got.values() for r in v})

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        if not self.assigned:
            self.consumer.assign(
                [TopicPartition(self.topic, p, 0) for p in range(PARTITIONS)]
            )  # from offset 0
            self.assigned = True
        while time.monotonic() < deadline:
            for msg in self.consumer.consume(500, timeout=0.2):
                if msg.error():
                    continue
                headers = dict(msg.headers() or [])
                self.got[msg.partition()].append((msg.key(), msg.value(), headers.get("olstream.seq", b"")))

    def wait_for(self, distinct: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.distinct() < distinct:
            assert time.monotonic() < deadline, (
                f"{self.distinct()} of {distinct} records on B after {timeout:.0f} s"
            )
            self.poll(0.5)

    def close(self) -> None:
        self.consumer.close()


def replays(sent: list[Record], got: list[Record]) -> int:
    """The copy is the partition's records in order, going back to an earlier record after a kill (a
    replay from MirrorMaker 2's last committed position) and on in order from there; the repeats."""
    index = {record: i for i, record in enumerate(sent)}
    cursor = frontier = repeats = 0  # the next record in order; the first record never seen
    for record in got:
        assert record in index, f"a record that was never sent, or altered: {record!r}"
        i = index[record]
        assert i <= cursor, f"record {i} follows record {cursor - 1}: a gap or out of order"
        if i < frontier:
            repeats += 1
        cursor, frontier = i + 1, max(frontier, i + 1)
    assert frontier == len(sent), f"{len(sent) - frontier} records missing at the end"
    return repeats


def check_copy(source: Source, target: Target) -> int:
    """Every partition's copy holds every record, in order, with its key, value and header; the repeats."""
    return sum(replays(source.sent[p], target.got[p]) for p in range(PARTITIONS))


def test_every_record_arrives_in_order_and_a_kill_9_only_repeats(
    clusters: tuple[str, str], tmp_path: Path
) -> None:
    a, b = clusters
    topic = _topic()
    ensure_topic(a, topic, PARTITIONS)
    source = Source(a, topic)
    source.send(600, "first")
    settings = MirrorSettings(
        source_bootstrap=a, target_bootstrap=b, data_dir=tmp_path, topics=re.escape(topic)
    )
    started = time.monotonic()
    state = start_mirror(settings)
    up_seconds = time.monotonic() - started
    target = Target(b, state.remote_topic(topic))
    try:
        assert state.remote_topic(topic) == f"A.{topic}"
        assert start_mirror(settings).pid == state.pid  # up is idempotent
        assert mirror_status(tmp_path).running
        target.wait_for(600, timeout=60)
        assert topic_partitions(b, state.remote_topic(topic)) == PARTITIONS
        assert check_copy(source, target) == 0

        # a second batch, streamed; MirrorMaker 2 is killed part-way and started again meanwhile
        producing = threading.Thread(target=source.send, args=(3000, "second", 600.0))
        producing.start()
        target.wait_for(600 + 600, timeout=60)
        os.kill(state.pid, signal.SIGKILL)
        killed_at = target.distinct()
        deadline = time.monotonic() + 10
        while mirror_status(tmp_path).running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not mirror_status(tmp_path).running
        started = time.monotonic()
        again = start_mirror(settings)
        restart_seconds = time.monotonic() - started
        assert again.pid != state.pid
        producing.join(timeout=60)
        assert not producing.is_alive()
        target.wait_for(3600, timeout=90)
        target.poll(2.0)  # whatever else arrives late: repeats, not new records
        repeats = check_copy(source, target)
        print(
            f"\nmirror up {up_seconds:.1f} s; killed with {killed_at} of 3600 records on B; restart "
            f"{restart_seconds:.1f} s; {target.total()} copies of 3600 records: {repeats} repeats"
        )
        assert target.distinct() == 3600
        assert repeats == target.total() - 3600
    finally:
        target.close()
        stop_mirror(tmp_path, timeout=20)
    assert not mirror_status(tmp_path).running and not pid_alive(state.pid)


def _olstream(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "olstream", *args],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_the_cli_with_the_identity_policy_keeps_topic_names(
    clusters: tuple[str, str], tmp_path: Path
) -> None:
    """`olstream mirror up|status|down` as a user runs them; aliases of their own (group east-mm2)."""
    a, b = clusters
    topic = _topic("olstream.identity")
    ensure_topic(a, topic, PARTITIONS)
    source = Source(a, topic)
    source.send(300, "only")
    flags = ["--data-dir", str(tmp_path)]
    up = _olstream(
        "mirror", "up", *flags, "--source-bootstrap", a, "--target-bootstrap", b, "--source-alias", "east",
        "--target-alias", "west", "--topics", re.escape(topic), "--replication-policy", "identity",
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        assert (
            up.stdout.startswith(f"MirrorMaker 2 (connect-mirror {DEFAULT_MIRROR_VERSION}) replicates east (")
            and "ready in" in up.stdout
        )
        status = _olstream("mirror", "status", *flags)
        assert status.returncode == 0 and "running: yes\n" in status.stdout
        assert (
            f"topics: {re.escape(topic)}\n" in status.stdout
            and "replication policy: identity" in status.stdout
        )
        target = Target(b, topic)  # the same name on B
        try:
            target.wait_for(300, timeout=60)
            assert check_copy(source, target) == 0
        finally:
            target.close()
    finally:
        down = _olstream("mirror", "down", *flags)
    assert down.returncode == 0 and down.stdout.startswith("stopped MirrorMaker 2 east ("), down.stderr
    assert _olstream("mirror", "status", *flags).returncode == 3
