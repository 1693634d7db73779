"""A faust consumer whose fetch loop hands each record to the streams without two tasks per record.

faust-streaming's ``Consumer._drain_messages`` delivers every fetched record with
``await self.wait_first(callback(message), self.suspend_flow.wait())``: two new tasks
and an ``asyncio.wait`` per record, so that a callback blocked by flow control is
abandoned when a rebalance suspends the flow. Measured with ``bench/stream.py`` that
is about a third of the worker's CPU.

The callback (the conductor's ``on_message``) can only suspend in three places: while
the app's flow control is suspended, while the producer buffer is above its limit
(``wait_until_ebb``), or while a destination stream's queue is full. This loop checks
all three (and the consumer's own ``suspend_flow``) synchronously just before the call
and awaits the callback inline only when none holds, so the inline call never
suspends; otherwise it uses faust's ``wait_first`` as before. (A first version took the
full-queue case inline too: a rebalance clears the queues without waking a blocked
put, so the fetch loop hung and table recovery after the next rebalance never got its
changelog records. The scale-out kill -9 test caught it.)

The loop is otherwise a copy of faust-streaming 0.15.3's ``_drain_messages``
(BSD-3-Clause, Copyright (c) 2017-2020 Robinhood Markets, Inc.); ``pyproject.toml``
pins faust-streaming to that line.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import AppT
from mode import Service, ServiceT

from olstream.errors import ConfigError


class InlineDrainConsumer(faust_aiokafka.Consumer):
    """faust's aiokafka consumer, with the per-record delivery awaited inline when it cannot block."""

    def _may_deliver_inline(self, message: Any) -> bool:
        """Whether the conductor's callback for this message will complete without suspending."""
        app = self.app
        buffer = app.producer.buffer
        # the unthreaded producer's pending queue (``buffer.size`` reads two faust settings per call)
        if buffer.pending.qsize() > buffer.max_messages:
            return False
        if self.suspend_flow.is_set() or not app.flow_control.is_active():
            return False
        channels = app.topics._topic_name_index.get(message.topic)  # type: ignore[attr-defined]
        if not channels:
            return False
        return not any(channel.queue.full() for channel in channels)

    async def _drain_messages(self, fetcher: ServiceT) -> None:  # pragma: no cover - needs a broker
        callback = self.callback
        getmany = self.getmany
        consumer_should_stop = cast(Service, self)._stopped.is_set
        fetcher_should_stop = cast(Service, fetcher)._stopped.is_set
        may_deliver_inline = self._may_deliver_inline

        get_read_offset = self._read_offset.__getitem__
        set_read_offset = self._read_offset.__setitem__
        set_flag = self.diag.set_flag
        unset_flag = self.diag.unset_flag
        commit_every = self._commit_every
        acks_enabled_for = self.app.topics.acks_enabled_for

        yield_every = 100
        num_since_yield = 0
        sleep = asyncio.sleep

        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(CONSUMER_FETCHING)
                ait: Any = getmany(timeout=1.0)
                # getmany may return at once for a long time; give the loop a turn
                await self.sleep(0)
                if not self.should_stop:
                    async for tp, message in ait:
                        num_since_yield += 1
                        if num_since_yield > yield_every:
                            await sleep(0)
                            num_since_yield = 0
                        offset = message.offset
                        r_offset = get_read_offset(tp)
                        if r_offset is None or offset >= r_offset:
                            gap = offset - (r_offset or 0)
                            if gap > 1 and r_offset and acks_enabled_for(message.topic):
                                await self._add_gap(tp, r_offset + 1, offset)
                            if commit_every is not None and self._n_acked >= commit_every:
                                self._n_acked = 0
                                await self.commit()
                            if may_deliver_inline(message):
                                await callback(message)
                            else:
                                await self.wait_first(callback(message), self.suspend_flow.wait())
                            set_read_offset(tp, offset)
                        else:
                            self.log.dev(
                                "DROPPED MESSAGE ROFF %r: k=%r v=%r", offset, message.key, message.value
                            )
                    unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            unset_flag(CONSUMER_FETCHING)


class InlineDrainTransport(faust_aiokafka.Transport):
    """faust's aiokafka transport with :class:`InlineDrainConsumer`."""

    Consumer = InlineDrainConsumer


def use_inline_drain(app: AppT) -> None:
    """Give the app the inline-drain transport (before anything created its consumer)."""
    if app.conf.producer_threaded:
        raise ConfigError("the inline-drain consumer needs faust's unthreaded producer")
    app.transport = InlineDrainTransport(app.conf.broker_consumer, app)
