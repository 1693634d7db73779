"""The worker's run store (``streams/runtime/run_store.py``) and its transactions
(``streams/runtime/transactions.py``) against a real broker: a restore reads only committed changelog
writes, resumes from the offset a store keeps, starts over from a recreated changelog; a restarted
worker's producer fences its previous incarnation, whose open transaction is aborted and never read;
a member the group dropped has its offsets refused by the generation (KIP-447), and its records are
never read."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from olstream.shared.kafka_admin import ensure_topic
from olstream.streams.runtime import metrics, transactions
from olstream.streams.runtime.group_member import GroupMember
from olstream.streams.runtime.run_store import RunStore
from olstream.streams.runtime.transaction_errors import GenerationFenced, ProducerFenced
from olstream.streams.runtime.transactions import WorkerTransactions

pytestmark = pytest.mark.integration

MakeTopic = Callable[..., str]


def _changelog_writes(
    bootstrap: str, topic: str, tid: str, batches: list[tuple[dict[bytes, bytes | None], bool]]
) -> None:
    """Write each batch of `key: value` to partition 0 in a transaction, committed or aborted."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    for writes, commit in batches:
        producer.begin_transaction()
        for key, value in writes.items():
            producer.produce(topic, value, key, partition=0)
        producer.flush(30)  # every write reached the partition, the aborted ones too
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def test_a_restore_reads_only_committed_writes_and_resumes_from_the_kept_offset(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    changelog = make_topic(partitions=1)
    _changelog_writes(
        kafka_bootstrap,
        changelog,
        f"{unique_group}.tx",
        [
            ({b"0:a": b"A1", b"0:b": b"B1"}, True),
            ({b"0:a": b"A-aborted", b"0:c": b"C-aborted", b"hwm:0:0": b"mark-aborted"}, False),
            ({b"0:b": None}, True),  # a tombstone
        ],
    )
    store = RunStore(kafka_bootstrap, str(tmp_path), changelog, unique_group)
    store.assign([0])
    assert dict(store.items([0])) == {b"0:a": b"A1"}
    probe = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_group})
    end = probe.get_watermark_offsets(TopicPartition(changelog, 0), timeout=10)[1]
    probe.close()
    assert end == 9  # 2 writes, a marker, 3 aborted writes, a marker, a tombstone, a marker
    assert store.stores[0].next_changelog_offset == end  # past the last commit marker
    store.close()

    _changelog_writes(kafka_bootstrap, changelog, f"{unique_group}.tx", [({b"0:d": b"D1"}, True)])
    again = RunStore(kafka_bootstrap, str(tmp_path), changelog, unique_group)
    again.assign([0])  # the tail only: the kept store already holds a
    assert dict(again.items([0])) == {b"0:a": b"A1", b"0:d": b"D1"}
    again.close()


def test_a_store_of_a_recreated_changelog_is_restored_from_its_start(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    changelog = make_topic(partitions=1)
    _changelog_writes(
        kafka_bootstrap, changelog, f"{unique_group}.tx", [({b"0:a": b"A", b"0:b": b"B"}, True)]
    )
    store = RunStore(kafka_bootstrap, str(tmp_path), changelog, unique_group)
    store.assign([0])
    store.close()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_topics([changelog])[changelog].result(30)
    for _ in range(60):  # the deletion takes a moment to be complete
        try:
            if ensure_topic(kafka_bootstrap, changelog, 1):
                break
        except Exception:  # the topic is still marked for deletion
            pass
        time.sleep(0.5)
    else:
        raise AssertionError(f"{changelog} could not be recreated")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(changelog, b"X", b"0:x", partition=0)
    producer.flush(30)
    again = RunStore(kafka_bootstrap, str(tmp_path), changelog, unique_group)
    again.assign([0])
    assert dict(again.items([0])) == {b"0:x": b"X"}  # nothing of the old topic's states
    again.close()


class _GroupMetadata:
    """A never-subscribed consumer's metadata (generation -1, no member: the broker checks nothing)."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})

    def __call__(self) -> bytes:
        metadata = self.consumer.consumer_group_metadata()
        assert isinstance(metadata, bytes)
        return metadata


def _transactions(
    bootstrap: str, tid: str, records: str, metadata: Callable[[], bytes]
) -> WorkerTransactions:
    txns = WorkerTransactions(bootstrap, tid, records, metadata, transaction_timeout=10.0)
    txns.start()
    return txns


def _read_committed(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "read", "isolation.level": "read_committed"}
    )
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        for _ in range(60):
            out += [m.value() for m in consumer.consume(100, timeout=0.5) if m.error() is None]
            if consumer.position([TopicPartition(topic, 0)])[0].offset >= end:
                break
        return out
    finally:
        consumer.close()


def test_a_restarted_worker_fences_its_previous_incarnation_whose_open_transaction_never_becomes_visible(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str
) -> None:
    """The same worker restarted on its data dir (the same transactional id) while its previous
    incarnation, paused, still had a transaction open: the new one's start aborts it, and the old one
    wakes to find itself fenced."""
    records, output, changelog = make_topic(partitions=1), make_topic(partitions=1), make_topic(partitions=1)
    metadata = _GroupMetadata(kafka_bootstrap, unique_group)
    tid = f"{unique_group}-worker-a"
    old = _transactions(kafka_bootstrap, tid, records, metadata)
    old.send(output, b"k", b"committed-by-old")
    old.send_changelog(changelog, 0, b"0:r", b"state-old")
    assert old.commit({0: 1}) == {0: 1}  # the changelog's next offset past its write
    old.send(output, b"k", b"zombie")  # then it pauses, its transaction open

    new = _transactions(kafka_bootstrap, tid, records, metadata)  # aborts it, fences the old producer
    with pytest.raises(ProducerFenced, match="is fenced"):
        old.commit({0: 2})
    new.send(output, b"k", b"committed-by-new")
    new.commit({0: 2})

    assert _read_committed(kafka_bootstrap, output) == [b"committed-by-old", b"committed-by-new"]
    committed = metadata.consumer.committed([TopicPartition(records, 0)], timeout=10)[0].offset
    assert committed == 2


async def _members_until(consumers: list[Any], done: Callable[[], bool], timeout: float = 60.0) -> None:
    """Let aiokafka members poll (they rebalance in the background) until `done()`."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the group did not settle"
        await asyncio.gather(*(c.getmany(timeout_ms=100) for c in consumers))


def test_a_dropped_member_s_offsets_are_refused_by_the_generation_and_its_records_never_visible(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str
) -> None:
    """KIP-447 beside an aiokafka member (faust's): a worker's one producer commits with the metadata
    of its member's generation; once the group moved to a newer generation, the same metadata is
    refused (GenerationFenced), the transaction is aborted, and a read_committed reader never sees it."""
    from aiokafka import AIOKafkaConsumer

    records, output = make_topic(partitions=2), make_topic(partitions=1)

    async def run() -> None:
        def member() -> AIOKafkaConsumer:
            return AIOKafkaConsumer(
                records, bootstrap_servers=kafka_bootstrap, group_id=unique_group, enable_auto_commit=False
            )

        first = member()
        await first.start()
        try:
            await _members_until([first], lambda: len(first.assignment()) == 2)
            coordinator = first._coordinator
            joined = (coordinator.generation, coordinator.member_id)
            txns = _transactions(
                kafka_bootstrap,
                f"{unique_group}-worker-a",
                records,
                GroupMember(unique_group, lambda: joined).metadata,
            )
            txns.send(output, b"k", b"committed-as-member")
            await asyncio.to_thread(txns.commit, {0: 1, 1: 0})

            second = member()  # the group moves on: a new generation
            await second.start()
            try:
                await _members_until(
                    [first, second],
                    lambda: first._coordinator.generation > joined[0] and len(second.assignment()) == 1,
                )
                txns.send(output, b"k", b"zombie")
                with pytest.raises(GenerationFenced, match="the group refused this worker's input offsets"):
                    await asyncio.to_thread(txns.commit, {0: 2, 1: 0})
                await asyncio.to_thread(txns.recover)  # aborted; the producer goes on
                assert not txns.open and txns.fatal is None
            finally:
                await second.stop()
        finally:
            await first.stop()

    asyncio.run(run())
    assert _read_committed(kafka_bootstrap, output) == [b"committed-as-member"]
    group = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_group})
    committed = group.committed([TopicPartition(records, 0)], timeout=10)[0].offset
    group.close()
    assert committed == 1


class _StuckOnce(Producer):
    """A producer whose first `send_offsets_to_transaction` blocks until released, as librdkafka's can
    for good when the group coordinator's broker died (librdkafka issues 5456, 5511)."""

    release = threading.Event()
    calls: list[str] = []

    def send_offsets_to_transaction(self, *args: Any, **kwargs: Any) -> None:
        _StuckOnce.calls.append("send_offsets")
        if len(_StuckOnce.calls) == 1:
            _StuckOnce.release.wait(60)
        super().send_offsets_to_transaction(*args, **kwargs)


def test_a_commit_whose_offsets_call_never_returns_goes_on_with_a_new_producer(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stuck producer's transaction is aborted by its replacement, which sends the batch again
    and commits it with the offset: a read_committed reader sees each message once."""
    monkeypatch.setattr(transactions, "Producer", _StuckOnce)
    monkeypatch.setattr(transactions, "SEND_OFFSETS_TIMEOUT_SECONDS", 2.0)
    monkeypatch.setattr(transactions, "STUCK_MARGIN_SECONDS", 1.0)
    records, output, changelog = make_topic(partitions=1), make_topic(partitions=1), make_topic(partitions=1)
    metadata = _GroupMetadata(kafka_bootstrap, unique_group)
    replaced = metrics.PRODUCERS_REPLACED._value.get()
    txns = _transactions(kafka_bootstrap, f"{unique_group}-worker-a", records, metadata)
    try:
        txns.send(output, b"k", b"event-1")
        txns.send(output, b"k", b"event-2")
        txns.send_changelog(changelog, 0, b"0:r", b"state")
        started = time.monotonic()
        next_changelog = txns.commit({0: 2})
        assert time.monotonic() - started < 30
        assert _StuckOnce.calls == ["send_offsets", "send_offsets"]
        stuck = txns.stuck
        assert stuck is not None and txns.producer is not stuck  # kept while its call blocks
        assert metrics.PRODUCERS_REPLACED._value.get() == replaced + 1
        # the stuck producer's changelog write (offset 0, aborted) and its abort marker (1) come first
        assert next_changelog == {0: 3}
    finally:
        _StuckOnce.release.set()
    deadline = time.monotonic() + 30
    while txns.stuck is not None:  # its call returned (fenced): closed and dropped
        assert time.monotonic() < deadline, "the replaced producer was never closed"
        time.sleep(0.1)
    assert _read_committed(kafka_bootstrap, output) == [b"event-1", b"event-2"]
    committed = metadata.consumer.committed([TopicPartition(records, 0)], timeout=10)[0].offset
    assert committed == 2
