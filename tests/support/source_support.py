"""Helpers for the source connector's integration tests: build logs, run the connector, read topics back."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

from olstream.contract import wire
from olstream.eventlog.simulate import simulate
from olstream.eventlog.store import StoredRow
from olstream.eventlog.stores import open_store

RECORDS_PER_RUN = 4.7  # what the simulator writes on average
HEADER_NAMES = {"olstream.partition", "olstream.offset", "olstream.type", "olstream.fingerprint"}


def write_log(url: str, records: int, *, partitions: int = 8, seed: int = 7) -> int:
    """Simulate runs (batch mode) until the log holds at least `records` records; returns the count."""
    store = open_store(url, partitions=partitions, create=True)
    try:
        written = 0
        while written < records:
            runs = max(10, int((records - written) / RECORDS_PER_RUN) + 10)
            written += simulate(store, runs, seed=seed + written, batch_size=20_000).records
        return written
    finally:
        store.close()


def read_rows(url: str) -> dict[tuple[int, int], bytes]:
    store = open_store(url)
    try:
        out: dict[tuple[int, int], bytes] = {}
        for p in store.partitions():
            after = -1
            while rows := store.read(p, after, 50_000):
                out.update(((r.partition, r.offset), r.payload) for r in rows)
                after = rows[-1].offset
        return out
    finally:
        store.close()


def append_raw(url: str, items: Sequence[tuple[int, bytes]]) -> list[int]:
    store = open_store(url)
    try:
        return store.append_many([(p, lambda _off, b=b: b) for p, b in items])
    finally:
        store.close()


@dataclass(frozen=True, slots=True)
class Published:
    kafka_partition: int
    kafka_offset: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]

    @property
    def header(self) -> dict[str, bytes]:
        return dict(self.headers)

    @property
    def position(self) -> tuple[int, int]:
        h = self.header
        return int(h["olstream.partition"]), int(h["olstream.offset"])


def read_topic(bootstrap: str, topic: str, *, read_committed: bool = False) -> list[Published]:
    """Every message of the topic, in Kafka order per Kafka partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"src-test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10)
        parts = sorted(meta.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        done: set[int] = set()
        out: list[Published] = []
        deadline = time.monotonic() + 60
        while len(done) < len(parts):
            assert time.monotonic() < deadline, f"reading {topic} took too long"
            for msg in consumer.consume(10_000, timeout=0.1):
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    done.add(msg.partition() or 0)
                    continue
                headers = tuple((k, v or b"") for k, v in (msg.headers() or []))
                kp, ko = msg.partition() or 0, msg.offset() or 0
                out.append(Published(kp, ko, msg.key() or b"", msg.value() or b"", headers))
        out.sort(key=lambda m: (m.kafka_partition, m.kafka_offset))
        return out
    finally:
        consumer.close()


def message_count(bootstrap: str, topic: str) -> int:
    """Sum of the high watermarks of the topic (messages, plus transaction markers if any)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"src-test-{uuid.uuid4().hex}"})
    try:
        meta = consumer.list_topics(topic, timeout=10)
        total = 0
        for p in meta.topics[topic].partitions:
            total += consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        return total
    finally:
        consumer.close()


def markers(messages: Sequence[Published]) -> list[tuple[int, int]]:
    """Positions of the rejected rows' markers (`wire.ROW_REJECTED`) among records-topic messages."""
    return [m.position for m in messages if m.header.get("olstream.type") == wire.ROW_REJECTED]


def by_log_partition(messages: Sequence[Published]) -> dict[int, list[Published]]:
    out: dict[int, list[Published]] = defaultdict(list)
    for m in messages:
        out[m.position[0]].append(m)
    return out


def assert_complete_and_ordered(
    messages: Sequence[Published],
    rows: dict[tuple[int, int], bytes],
    *,
    exactly_once: bool,
    without_heads: Collection[tuple[int, int]] = (),
) -> int:
    """Every row is in `messages` with its exact bytes, in offset order per log partition; returns dups.

    Every RunStarted carries the source's heads, except at `without_heads` (an older source's)."""
    duplicates = 0
    first_copy: dict[tuple[int, int], Published] = {}
    expected: dict[int, list[int]] = defaultdict(list)
    for p, o in sorted(rows):
        expected[p].append(o)
    for partition, msgs in by_log_partition(messages).items():
        assert len({m.kafka_partition for m in msgs}) == 1, "one Kafka partition per log partition"
        high = -1
        upcoming = iter(expected[partition])
        for m in msgs:
            pos = m.position
            assert m.key == str(partition).encode()
            if m.header.get("olstream.type") == wire.ROW_REJECTED:  # a rejected row's position marker
                assert m.value == b"" and pos not in rows, pos
                assert set(m.header) == HEADER_NAMES - {"olstream.fingerprint"}
                continue
            assert m.value == rows[pos], f"bytes differ at {pos}"
            if m.header["olstream.type"] == b"RunStarted" and pos in without_heads:
                assert set(m.header) == HEADER_NAMES, pos  # published by a source before heads
            elif m.header["olstream.type"] == b"RunStarted":
                assert set(m.header) == HEADER_NAMES | {wire.HEADER_HEADS}
                heads = wire.decode_heads(m.header[wire.HEADER_HEADS])
                assert heads is not None and heads.get(partition, -1) >= pos[1], (pos, heads)
            else:
                assert set(m.header) == HEADER_NAMES
            assert m.header["olstream.fingerprint"] == m.value[2:10].hex().encode()
            if pos[1] <= high:  # a re-publication: byte-identical to the first copy
                assert not exactly_once, f"{pos} seen twice"
                first = first_copy[pos]
                assert (m.key, m.value, m.headers) == (first.key, first.value, first.headers)
                duplicates += 1
                continue
            assert pos[1] == next(upcoming, None), f"log partition {partition}: offset {pos[1]} after {high}"
            high = pos[1]
            first_copy[pos] = m
    assert set(first_copy) == set(rows), f"missing {sorted(set(rows) - set(first_copy))[:10]}"
    return duplicates


def run_source(
    cmd: Sequence[str], env: dict[str, str], log_url: str, topic: str, *extra: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, "source", "--log", log_url, "--topic", topic, "--until-idle", "--idle-seconds", "0.5", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_source(
    cmd: Sequence[str], env: dict[str, str], log_url: str, topic: str, stderr_path: Path, *extra: str
) -> subprocess.Popen[bytes]:
    with stderr_path.open("wb") as err:
        return subprocess.Popen(
            [*cmd, "source", "--log", log_url, "--topic", topic, *extra],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def wait_for_text(path: Path, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        time.sleep(0.02)
    tail = path.read_text(errors="replace")[-3000:]
    raise AssertionError(f"{text!r} not in {path} after {timeout} s:\n{tail}")


def stored_rows(rows: dict[tuple[int, int], bytes]) -> list[StoredRow]:
    return [StoredRow(p, o, b) for (p, o), b in sorted(rows.items())]
