"""The worker's lock: one of a record being processed, a checkpoint, a rebalance hook holds it."""

from __future__ import annotations

import asyncio


class TurnLock:
    """An asyncio lock that also tells whether anyone holds it or waits for it (`free`).

    A record whose processing never awaits may skip taking a free lock: acquiring and releasing it
    at once would let nothing else run in between. The lock is fair (asyncio's), so a checkpoint or
    rebalance hook that waits for it makes it not free, and records then take it and queue behind it.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._queued = 0  # tasks holding or waiting for the lock

    def free(self) -> bool:
        return self._queued == 0

    async def __aenter__(self) -> None:
        self._queued += 1
        try:
            await self._lock.acquire()
        except BaseException:
            self._queued -= 1
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._lock.release()
        self._queued -= 1
