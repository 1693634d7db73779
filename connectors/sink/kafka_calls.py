"""The sink's Kafka calls that wait on a broker, run off its event loop.

A commit, a watermark or committed-offset query, or closing the consumer can take seconds while a
broker is down or moving; on the event loop that would stop every send for as long. `KafkaCalls`
runs them one at a time on one thread. The sink awaits each call from its consuming coroutine, the
only one that touches the consumer, so the consumer is never used from two threads at once and no
rebalance callback runs while a call is on the thread.

Producer callbacks are the exception: a dead letter's delivery callback changes the sink's state,
so it must run on the loop. `flush` therefore polls the producer from the loop, in short steps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
FLUSH_STEP = 0.01  # s between polls of a producer that is flushed from the loop


class KafkaCalls:
    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="olstream-sink-kafka")

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """`call(*args)` on the Kafka thread; its result (or its exception) here."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, call, *args)

    def close(self) -> None:
        """No more calls; a call still running (a broker that never answers) is not waited for."""
        self._thread.shutdown(wait=False)


async def flush(producer: Any, timeout: float) -> int:
    """`producer.flush(timeout)` without blocking the loop: its delivery callbacks run here; how many
    messages are still not delivered when it returns."""
    deadline = time.monotonic() + timeout
    while (left := len(producer)) and time.monotonic() < deadline:
        producer.poll(0)
        await asyncio.sleep(FLUSH_STEP)
    return int(left)
