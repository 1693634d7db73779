"""The records topic's placement against a real broker: fixed once, recorded in the offsets topic, kept.

- a topic the source creates gets the log's partition count and `modulo` placement;
- a topic a worker created first (empty) gets `modulo` over its own count, and growing it later
  moves nothing;
- a topic written before placements were recorded (by the source's old key-hash partitioner)
  keeps key-hash over its count at the time, recorded on the first resume, also after it grew.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from olstream.contract.placement import MAPPING_KEY
from tests.support.source_support import (
    Published,
    assert_complete_and_ordered,
    by_log_partition,
    read_rows,
    read_topic,
    run_source,
    write_log,
)
from tests.support.stream_support import headers_for

pytestmark = pytest.mark.integration


def placement_records(bootstrap: str, topic: str) -> list[bytes]:
    return [m.value for m in read_topic(bootstrap, f"{topic}.offsets") if m.key == MAPPING_KEY]


def kafka_partition_of_each_log_partition(messages: list[Published]) -> dict[int, int]:
    out: dict[int, int] = {}
    for log_partition, msgs in by_log_partition(messages).items():
        (kafka_partition,) = {m.kafka_partition for m in msgs}
        out[log_partition] = kafka_partition
    return out


def grow(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, partitions)])[topic].result(30)


def test_a_topic_it_creates_gets_the_logs_partition_count_and_modulo_placement_recorded_once(
    kafka_bootstrap: str,
    unique_topic: str,
    olstream_cmd: list[str],
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    write_log(url, 3_000, partitions=12)
    rows = read_rows(url)
    first = run_source(olstream_cmd, subprocess_env, url, unique_topic)
    assert first.returncode == 0, first.stderr[-3000:]
    assert (
        "holds no record yet: placement log partition p -> Kafka partition p mod 12 recorded" in first.stderr
    )

    messages = read_topic(kafka_bootstrap, unique_topic)
    assert assert_complete_and_ordered(messages, rows, exactly_once=True) == 0
    assert kafka_partition_of_each_log_partition(messages) == {p: p for p in range(12)}
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert len(admin.list_topics(unique_topic, timeout=10).topics[unique_topic].partitions) == 12
    assert placement_records(kafka_bootstrap, unique_topic) == [b"modulo:12"]

    second = run_source(olstream_cmd, subprocess_env, url, unique_topic)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "0 records published" in second.stderr
    assert "not where its placement" not in second.stderr  # the scan found each one where it looked
    assert placement_records(kafka_bootstrap, unique_topic) == [b"modulo:12"]  # not recorded again


def test_a_topic_a_worker_created_first_gets_modulo_over_its_count_and_growing_it_moves_nothing(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    olstream_cmd: list[str],
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=6)  # empty, as `olstream worker` creates its input
    url = f"sqlite:///{tmp_path / 'events.db'}"
    write_log(url, 2_000, partitions=8)
    first = run_source(olstream_cmd, subprocess_env, url, topic)
    assert first.returncode == 0, first.stderr[-3000:]
    assert placement_records(kafka_bootstrap, topic) == [b"modulo:6"]
    placed = kafka_partition_of_each_log_partition(read_topic(kafka_bootstrap, topic))
    assert placed == {p: p % 6 for p in range(8)}
    counts = [sum(1 for kp in placed.values() if kp == k) for k in range(6)]
    assert counts == [2, 2, 1, 1, 1, 1]  # the default partitioner gave [1, 2, 0, 0, 3, 2]

    grow(kafka_bootstrap, topic, 9)
    write_log(url, 4_000, seed=11)  # more rows on every log partition
    rows = read_rows(url)
    second = run_source(olstream_cmd, subprocess_env, url, topic)
    assert second.returncode == 0, second.stderr[-3000:]
    messages = read_topic(kafka_bootstrap, topic)
    assert assert_complete_and_ordered(messages, rows, exactly_once=True) == 0
    assert kafka_partition_of_each_log_partition(messages) == {p: p % 6 for p in range(8)}
    assert placement_records(kafka_bootstrap, topic) == [b"modulo:6"]


def publish_as_the_old_source(bootstrap: str, topic: str, rows: dict[tuple[int, int], bytes]) -> None:
    """Records and checkpoints as the source wrote them before placements were recorded: the records
    placed by librdkafka's default partitioner (CRC-32 of the key), no placement record."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    last: dict[int, int] = {}
    for (partition, offset), payload in sorted(rows.items()):
        key = str(partition).encode()
        producer.produce(topic, payload, key, headers=headers_for(partition, offset, payload))
        last[partition] = offset
    for partition, offset in last.items():
        key, value = str(partition).encode(), str(offset).encode()
        producer.produce(
            f"{topic}.offsets", value, key, headers=[("olstream.partition", key), ("olstream.offset", value)]
        )
    assert producer.flush(30) == 0


def test_resume_over_a_topic_written_with_the_key_hash_placement_keeps_it_also_after_it_grew(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    olstream_cmd: list[str],
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=6)
    make_topic(partitions=6, name=f"{topic}.errors")
    make_topic(partitions=1, config={"cleanup.policy": "compact"}, name=f"{topic}.offsets")
    url = f"sqlite:///{tmp_path / 'events.db'}"
    write_log(url, 2_000, partitions=8)
    before = read_rows(url)
    earlier = {pos: b for pos, b in before.items() if pos[1] < max(o for p, o in before if p == pos[0]) // 2}
    publish_as_the_old_source(kafka_bootstrap, topic, earlier)
    key_hash = {p: zlib.crc32(str(p).encode()) % 6 for p in range(8)}
    assert kafka_partition_of_each_log_partition(read_topic(kafka_bootstrap, topic)) == key_hash

    first = run_source(olstream_cmd, subprocess_env, url, topic)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "held records before placements were recorded" in first.stderr
    assert placement_records(kafka_bootstrap, topic) == [b"key-hash:6"]
    messages = read_topic(kafka_bootstrap, topic)
    old = set(earlier)  # the old source put no heads on them
    assert assert_complete_and_ordered(messages, before, exactly_once=True, without_heads=old) == 0
    assert kafka_partition_of_each_log_partition(messages) == key_hash

    grow(kafka_bootstrap, topic, 12)  # the partitioner would now hash over 12: the placement stays at 6
    write_log(url, 4_000, seed=11)
    rows = read_rows(url)
    assert {p for p, _ in rows} == set(range(8))
    second = run_source(olstream_cmd, subprocess_env, url, topic)
    assert second.returncode == 0, second.stderr[-3000:]
    messages = read_topic(kafka_bootstrap, topic)
    assert assert_complete_and_ordered(messages, rows, exactly_once=True, without_heads=old) == 0
    assert kafka_partition_of_each_log_partition(messages) == key_hash
    assert any(zlib.crc32(str(p).encode()) % 12 != key_hash[p] for p in range(8))  # growing would move some
    assert placement_records(kafka_bootstrap, topic) == [b"key-hash:6"]


def test_records_placed_against_the_recorded_placement_are_found_by_reading_the_topic_whole(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    olstream_cmd: list[str],
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=6)
    make_topic(partitions=1, config={"cleanup.policy": "compact"}, name=f"{topic}.offsets")
    url = f"sqlite:///{tmp_path / 'events.db'}"
    write_log(url, 2_000, partitions=8)
    rows = read_rows(url)
    earlier = {pos: b for pos, b in rows.items() if pos[1] < 50}
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    producer.produce(f"{topic}.offsets", b"modulo:6", MAPPING_KEY)
    for (partition, offset), payload in sorted(earlier.items()):  # a producer that broke the contract
        wrong = (partition + 1) % 6
        producer.produce(
            topic, payload, str(partition).encode(), wrong, headers=headers_for(partition, offset, payload)
        )
    assert producer.flush(30) == 0

    run = run_source(olstream_cmd, subprocess_env, url, topic)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "not where its placement (log partition p -> Kafka partition p mod 6) puts it" in run.stderr
    messages = read_topic(kafka_bootstrap, topic)
    later = [m for m in messages if m.position[1] >= 50]
    assert len(later) == len(rows) - len(earlier)  # resumed after what was there: nothing published twice
    assert all(m.kafka_partition == m.position[0] % 6 for m in later)
