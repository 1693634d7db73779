"""The sink's handling of job-version repeats (`job_versions`), kept apart from its loop for size.

`sink.Sink` is a `Repeats`: it drops repeats that are stale or outdated before they are sent, gives
up a repeat the receiver refuses (the event itself was delivered), and at a clean stop posts the
repeats still waiting, so a stopped sink leaves each job at its latest run too.
"""

from __future__ import annotations

import asyncio
import logging
import time

from olstream.connectors.sink.delivery import Outcome, PendingEvent, Retries
from olstream.connectors.sink.job_versions import LatestTerminals
from olstream.connectors.sink.transports import SinkTransport

log = logging.getLogger(__name__)


class Repeats:
    ready: asyncio.Queue[PendingEvent]
    transport: SinkTransport
    retries: Retries
    latest: LatestTerminals
    repeating: int  # repeats handed out and not settled yet

    def _stale(self, event: PendingEvent) -> bool:
        raise NotImplementedError

    def _sendable(self, batch: list[PendingEvent]) -> list[PendingEvent]:
        """The batch without stale events and without repeats that are no longer their job's latest
        (a newer terminal event was delivered since: its own settling decides on a repeat)."""
        keep = []
        for event in batch:
            if self._stale(event) or (event.repeat and not self.latest.is_latest(event)):
                self.repeating -= event.repeat
            else:
                keep.append(event)
        return keep

    def _give_up_repeat(self, event: PendingEvent, why: str) -> None:
        """The event itself was delivered: a repeat that cannot be delivered is not dead-lettered."""
        self.repeating -= 1
        self.retries.forget(event.ident)
        log.warning("repeat of %s not delivered (%s); not repeated again", event.where(), why)

    def _keep_repeats(self, batch: list[PendingEvent]) -> None:
        """A worker that stops puts back the repeats it took, for `_flush_repeats`."""
        for event in batch:
            if event.repeat:
                self.ready.put_nowait(event)

    async def _flush_repeats(self, deadline: float) -> None:
        """At a clean stop, once nothing is in flight: post the waiting repeats one at a time, each
        job's once, and only those still their job's latest (a repeat can wait long behind a backlog)."""
        sent = 0
        posted: set[tuple[str, int, int]] = set()
        for event in self._sendable([self.ready.get_nowait() for _ in range(self.ready.qsize())]):
            if event.repeat and event.ident not in posted and time.monotonic() < deadline:
                posted.add(event.ident)
                sent += (await self.transport.send(event)).outcome is Outcome.DELIVERED
        if sent:
            log.info("posted %d repeats of job versions before stopping", sent)
