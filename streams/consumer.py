"""The worker's faust consumer: on the input topic, only the agent's acks count towards commits.

faust-streaming's stream acks a record it drops without handing it to the agent: one
fetched before a rebalance (an older consumer generation) or taken while the flow is
suspended. An ack marks the offset safe to commit, so such a record could be committed
over although no agent processed it, and faust's commit takes the first run of
consecutive acked offsets (after a rebalance it starts from whatever was acked). The
agent acks only what it processed and whose events the broker acknowledged
(``StreamWorker.flush_batch``), inside :meth:`WorkerConsumer.agent_acks`; any other ack on
the input topic releases the record without marking its offset.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import AppT
from faust.types.tuples import ack_lock


class WorkerConsumer(faust_aiokafka.Consumer):
    """faust's aiokafka consumer, counting only the agent's acks on the input topic."""

    _agent_acking = False

    @property
    def input_topic(self) -> str:
        return cast(WorkerTransport, self.transport).input_topic

    @contextmanager
    def agent_acks(self) -> Iterator[None]:
        """Acks given inside this block are the agent's (processed and flushed records)."""
        self._agent_acking = True
        try:
            yield
        finally:
            self._agent_acking = False

    def ack(self, message: Any) -> bool:
        if self._agent_acking or message.topic != self.input_topic:
            return bool(super().ack(message))
        # a record faust's stream dropped: released (a rebalance does not wait for it), but its
        # offset is not marked safe to commit; the partition's owner reads it again
        with ack_lock:  # faust's own ack holds it for the same fields
            message.acked = True
            self._unacked_messages.discard(message)
        return False


class WorkerTransport(faust_aiokafka.Transport):
    """faust's aiokafka transport with :class:`WorkerConsumer`."""

    Consumer = WorkerConsumer
    input_topic = ""


def use_worker_consumer(app: AppT, input_topic: str) -> None:
    """Give the app the worker's transport (before anything created its consumer)."""
    transport = WorkerTransport(app.conf.broker_consumer, app)
    transport.input_topic = input_topic
    app.transport = transport
