"""The sink's back-pressure: which owned partitions its consumer has paused, and why.

Pausing stops fetching, not polling: the consumer is still polled, so the group membership holds.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from confluent_kafka import TopicPartition

log = logging.getLogger(__name__)

TP = tuple[str, int]


class Pauses:
    def __init__(self, consumer: Any, max_buffered: int) -> None:
        self.consumer = consumer
        self.high = max_buffered  # events held; resumed at half of it
        self.paused: set[TP] = set()
        self.reason: str | None = None
        self.fresh: set[TP] = set()  # newly assigned: resumed explicitly once, whatever came before

    def assigned(self, tp: TP) -> None:
        self.paused.discard(tp)
        self.fresh.add(tp)

    def forget(self, tp: TP) -> None:
        self.paused.discard(tp)
        self.fresh.discard(tp)

    def receiver_back(self) -> None:
        """The receiver accepts events again: a later pause for it is logged again."""
        self.reason = None

    def apply(self, owned: Collection[TP], backing_off: bool, buffered: int) -> None:
        """Pause every owned partition while the receiver's circuit is open or too many events are
        held; resume them once it is closed and the events held are down to half."""
        want_pause = backing_off or buffered >= self.high
        want_resume = not backing_off and buffered <= self.high // 2
        owned = set(owned)
        if self.fresh and not want_pause:
            self.consumer.resume([TopicPartition(t, p) for t, p in self.fresh if (t, p) in owned])
        self.fresh.clear()
        if want_pause:
            reason = "backing off" if backing_off else "buffer full"
            if reason != self.reason:  # logged when the reason changes, not every cycle
                log.info("pausing consumption (%s, %d events held); still polling", reason, buffered)
                self.reason = reason
            if owned - self.paused:
                self.consumer.pause([TopicPartition(t, p) for t, p in owned - self.paused])
                self.paused |= owned
        elif want_resume and self.paused:
            self.consumer.resume([TopicPartition(t, p) for t, p in self.paused if (t, p) in owned])
            self.paused.clear()
            log.debug("resuming consumption")
