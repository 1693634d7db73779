"""Repeats of job versions (`job_versions`): which are sent, which are given up, and the stop.

`Repeats` owns the `LatestTerminals` that hands repeats out and counts those not settled yet
(`pending`; the sink is idle only when it is 0). It drops repeats that are stale or outdated before
they are sent, gives up a repeat the receiver refuses (the event itself was delivered), and at a
clean stop posts the repeats still waiting, so a stopped sink leaves each job at its latest run too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from olstream.connectors.sink.delivery import Outcome, PendingEvent
from olstream.connectors.sink.job_versions import LatestTerminals
from olstream.connectors.sink.transports import HttpTransport, SinkTransport

log = logging.getLogger(__name__)

Stale = Callable[[PendingEvent], bool]


class Repeats:
    def __init__(self, latest: LatestTerminals) -> None:
        self.latest = latest
        self.pending = 0  # repeats handed out and not settled yet

    @classmethod
    def for_transport(cls, transport: SinkTransport) -> Repeats:
        """Only an HTTP receiver applies job versions, so only it gets repeats."""
        return cls(LatestTerminals(enabled=isinstance(transport, HttpTransport)))

    def after_settling(self, event: PendingEvent, delivered: bool, stale: Stale) -> PendingEvent | None:
        """The repeat to send after `event` settled, if any (counted pending until it settles)."""
        repeat = self.latest.settled(event, delivered)
        if repeat is None or stale(repeat):
            return None
        self.pending += 1
        return repeat

    def settled(self, event: PendingEvent) -> None:
        """`event` is gone (delivered, given up or no longer ours): a repeat of it no longer pends."""
        self.pending -= event.repeat

    def sendable(self, batch: list[PendingEvent], stale: Stale) -> list[PendingEvent]:
        """The batch without stale events and without repeats that are no longer their job's latest
        (a newer terminal event was delivered since: its own settling decides on a repeat)."""
        keep = []
        for event in batch:
            if stale(event) or (event.repeat and not self.latest.is_latest(event)):
                self.settled(event)
            else:
                keep.append(event)
        return keep

    def give_up(self, event: PendingEvent, why: str) -> None:
        """The event itself was delivered: a repeat that cannot be delivered is not dead-lettered."""
        self.settled(event)
        log.warning("repeat of %s not delivered (%s); not repeated again", event.where(), why)

    @staticmethod
    def kept(batch: Iterable[PendingEvent]) -> list[PendingEvent]:
        """What a stopping worker puts back of the batch it took: its repeats, for `flush`."""
        return [event for event in batch if event.repeat]

    async def flush(
        self, waiting: list[PendingEvent], stale: Stale, transport: SinkTransport, deadline: float
    ) -> None:
        """At a clean stop, once nothing is in flight: post the waiting repeats one at a time, each
        job's once, and only those still their job's latest (a repeat can wait long behind a backlog)."""
        sent = 0
        posted: set[tuple[str, int, int]] = set()
        for event in self.sendable(waiting, stale):
            if event.repeat and event.ident not in posted and time.monotonic() < deadline:
                posted.add(event.ident)
                sent += (await transport.send(event)).outcome is Outcome.DELIVERED
        if sent:
            log.info("posted %d repeats of job versions before stopping", sent)
