"""The worker's consumer (``streams.consumer``): on the input topic only the agent's acks count."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust
import pytest

from streams.app import build_app
from streams.consumer import WorkerConsumer, WorkerTransport
from streams.settings import WorkerSettings

TOPIC = "olstream.eventlog"


@pytest.fixture(autouse=True)
def _event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """faust's services bind to the current event loop when created."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


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


def test_only_the_agents_acks_mark_input_offsets_safe_to_commit(tmp_path: Path) -> None:
    consumer = _consumer(tmp_path)
    tp = faust.types.TP(TOPIC, 0)
    dropped = Message(tp=tp, topic=TOPIC, offset=7, acked=False)
    consumer._unacked_messages.add(dropped)
    assert consumer.ack(dropped) is False  # faust's stream dropping a stale record
    assert dropped.acked and dropped not in consumer._unacked_messages
    assert 7 not in consumer._acked_index[tp]
    with consumer.agent_acks():
        assert consumer.ack(Message(tp=tp, topic=TOPIC, offset=5, acked=False)) is True
    assert list(consumer._acked[tp]) == [5]


def test_acks_on_other_topics_are_faust_s_as_before(tmp_path: Path) -> None:
    consumer = _consumer(tmp_path)
    tp = faust.types.TP("other", 1)
    assert consumer.ack(Message(tp=tp, topic="other", offset=3, acked=False)) is True
    assert list(consumer._acked[tp]) == [3]
