"""The worker's consumer (``streams/runtime/consumer.py``): on the input topic only the agent's acks count."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust
import pytest

from olstream.streams.input_ledger import InputLedger
from olstream.streams.runtime.app import build_app
from olstream.streams.runtime.consumer import WorkerConsumer, WorkerTransport
from olstream.streams.settings import WorkerSettings

TOPIC = "olstream.eventlog"


@pytest.fixture(autouse=True)
def _event_loop(loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
    """faust's services bind to the current event loop when created (conftest.py's loop)."""
    return loop


class Message(SimpleNamespace):  # weak-referenceable and hashable by identity, as faust's are
    __hash__ = object.__hash__


def _consumer(tmp_path: Path) -> Any:
    sa = build_app(
        WorkerSettings(data_dir=str(tmp_path), app_id="unit-consumer", input_topic=TOPIC), partitions=3
    )
    consumer = sa.app.consumer
    consumer.app.topics._acking_topics.update({TOPIC, "other"})
    return consumer


def test_the_worker_app_gets_the_worker_consumer(tmp_path: Path) -> None:
    sa = build_app(WorkerSettings(data_dir=str(tmp_path), app_id="unit-consumer"), partitions=3)
    assert isinstance(sa.app.transport, WorkerTransport)
    assert isinstance(sa.app.consumer, WorkerConsumer)
    assert sa.app.consumer.input_topic == "olstream.eventlog"


def _input_message(offset: int, partition: int = 0) -> Message:
    return Message(
        tp=faust.types.TP(TOPIC, partition), topic=TOPIC, partition=partition, offset=offset, acked=False
    )


def test_only_the_agents_acks_mark_input_offsets_safe_to_commit(tmp_path: Path) -> None:
    consumer = _consumer(tmp_path)
    tp = faust.types.TP(TOPIC, 0)
    consumer.ledgers[0] = InputLedger(5)  # as seek_to_committed leaves it: committed offset 5
    dropped = _input_message(6)
    consumer._unacked_messages.add(dropped)
    assert consumer.ack(dropped) is False  # faust's stream dropping a stale record
    assert dropped.acked and dropped not in consumer._unacked_messages
    with consumer.agent_acks():
        assert consumer.ack(_input_message(5)) is True
        assert consumer.ack(_input_message(7)) is True
    assert consumer._new_offset(tp) == 6  # 6 was dropped, not processed: the commit stops before it
    assert tp in set(consumer._filter_tps_with_pending_acks())
    with consumer.agent_acks():
        assert consumer.ack(_input_message(6)) is True  # read again and processed
    assert consumer._new_offset(tp) == 8


def test_faust_s_gaps_never_move_an_input_commit(tmp_path: Path) -> None:
    consumer = _consumer(tmp_path)
    tp = faust.types.TP(TOPIC, 1)
    consumer.ledgers[1] = InputLedger(100)
    asyncio.get_event_loop().run_until_complete(consumer._add_gap(tp, 100, 900))
    assert not consumer._gap[tp]
    with consumer.agent_acks():
        consumer.ack(_input_message(901, partition=1))
    assert consumer._new_offset(tp) == 100


def test_acks_before_the_partition_was_sought_do_not_count(tmp_path: Path) -> None:
    consumer = _consumer(tmp_path)
    with consumer.agent_acks():
        assert consumer.ack(_input_message(0, partition=2)) is True
    assert consumer._new_offset(faust.types.TP(TOPIC, 2)) is None


def test_faust_keeps_no_read_offsets_for_the_input(tmp_path: Path) -> None:
    # faust drops a fetched record below its read offset as already read; a read offset written
    # back after a revocation dropped a new owner's records
    consumer = _consumer(tmp_path)
    read = consumer._read_offset
    read[faust.types.TP(TOPIC, 1)] = 686
    read.update({faust.types.TP(TOPIC, 2): 5})  # as faust's perform_seek writes them
    read[faust.types.TP("other", 1)] = 3
    assert read[faust.types.TP(TOPIC, 1)] is None
    assert read[faust.types.TP(TOPIC, 2)] is None
    assert read[faust.types.TP("other", 1)] == 3
    assert read[faust.types.TP("other", 2)] is None


class FakeThread:
    def __init__(self, committed: dict[Any, int | None], earliest: dict[Any, int]) -> None:
        self.committed, self.earliest, self.seeks = committed, earliest, []

    async def seek_to_committed(self) -> dict[Any, int | None]:
        return self.committed

    async def earliest_offsets(self, *tps: Any) -> dict[Any, int]:
        return {tp: self.earliest[tp] for tp in tps}

    async def seek_wait(self, partitions: dict[Any, int]) -> None:  # runs on the consumer's thread
        self.seeks.extend((tp.partition, offset) for tp, offset in partitions.items())


def test_seeking_to_committed_restarts_the_ledgers_and_seeks_uncommitted_partitions(tmp_path: Path) -> None:
    consumer = _consumer(tmp_path)
    tp0, tp1, tp2 = (faust.types.TP(TOPIC, p) for p in range(3))
    consumer.ledgers[0] = InputLedger(3)
    consumer.ledgers[0].note_acked(50)
    thread = FakeThread({tp0: 40, tp1: None, tp2: 0}, {tp1: 12, tp2: 0})
    consumer._thread = thread
    asyncio.get_event_loop().run_until_complete(consumer.seek_to_committed())
    assert {p: ledger.base for p, ledger in consumer.ledgers.items()} == {0: 40, 1: 12, 2: 0}
    assert consumer.ledgers[0].acked == set()
    # aiokafka seeks only to committed offsets above 0: the others are sought here
    assert sorted(thread.seeks) == [(1, 12), (2, 0)]


def test_acks_on_other_topics_are_faust_s_as_before(tmp_path: Path) -> None:
    consumer = _consumer(tmp_path)
    tp = faust.types.TP("other", 1)
    assert consumer.ack(Message(tp=tp, topic="other", offset=3, acked=False)) is True
    assert list(consumer._acked[tp]) == [3]
