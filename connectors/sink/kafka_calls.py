"""The sink's Kafka calls that wait on a broker, run off its event loop, and the way back onto it.

Polling, a commit, a watermark or committed-offset query, or closing the consumer can take seconds
while a broker is down or moving; on the event loop that would stop every send for as long.
`KafkaCalls` runs them one at a time on one thread. The sink awaits each call from its consuming
coroutine, the only one that touches the consumer, so the consumer is never used from two threads
at once.

Rebalance callbacks run inside `consume` and `close`, so on the Kafka thread. The sink's state
belongs to the loop: a callback hands its part in that state to the loop with `on_loop` and waits
for it there. The loop is free meanwhile (its consuming coroutine only awaits the call that runs
the callback), so this cannot deadlock; what waits on the broker (the commit of a revocation) stays
on the Kafka thread.

Producer callbacks are the exception: a dead letter's delivery callback changes the sink's state,
so it must run on the loop. `flush` therefore polls the producer from the loop, in short steps.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
FLUSH_STEP = 0.01  # s between polls of a producer that is flushed from the loop
LOOP_CHECK = 0.1  # s between looks at whether the loop, while a callback waits for it, was closed


class KafkaCalls:
    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="olstream-sink-kafka")
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """`call(*args)` on the Kafka thread; its result (or its exception) here."""
        self._loop = asyncio.get_running_loop()
        return await self._loop.run_in_executor(self._thread, call, *args)

    def on_loop(self, call: Callable[..., T], *args: Any) -> T:
        """`call(*args)` on the loop of the last `run`, waited for on this thread; its result (or its
        exception) here. Called on the loop's own thread, or with no loop to hand it to (none ran
        yet, or it is closed: nothing else can run on it any more), `call` runs at once, here."""
        loop = self._loop
        if loop is None or loop.is_closed() or _running_loop() is loop:
            return call(*args)
        answer: concurrent.futures.Future[T] = concurrent.futures.Future()

        def on_the_loop() -> None:
            if answer.set_running_or_notify_cancel():
                try:
                    answer.set_result(call(*args))
                except BaseException as e:  # handed to the waiting thread, raised there
                    answer.set_exception(e)

        try:
            loop.call_soon_threadsafe(on_the_loop)
        except RuntimeError:  # closed
            return call(*args)
        while True:
            try:
                return answer.result(timeout=LOOP_CHECK)
            except TimeoutError:
                if loop.is_closed() and answer.cancel():  # never to run there
                    return call(*args)

    def close(self) -> None:
        """No more calls; a call still running (a broker that never answers) is not waited for."""
        self._thread.shutdown(wait=False)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def flush(producer: Any, timeout: float) -> int:
    """`producer.flush(timeout)` without blocking the loop: its delivery callbacks run here; how many
    messages are still not delivered when it returns."""
    deadline = time.monotonic() + timeout
    while (left := len(producer)) and time.monotonic() < deadline:
        producer.poll(0)
        await asyncio.sleep(FLUSH_STEP)
    return int(left)
