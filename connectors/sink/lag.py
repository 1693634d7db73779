"""`olstream_sink_lag`: the sink's events on the topic that its group has not committed.

`LagGauge` keeps what the gauge needs beyond the sink's commit trackers: where the group started on
each owned partition and the highest end seen of each. Its `read` asks the broker and changes
nothing, so the sink runs it on its Kafka thread (`kafka_calls.KafkaCalls`), never on its event
loop; `apply` then sets the gauge and the state on the loop, which alone changes it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client import Gauge

log = logging.getLogger(__name__)

LAG = Gauge("olstream_sink_lag", "Events on the topic not yet committed by the sink (owned partitions)")
LAG_QUERY_TIMEOUT = 1.0  # s; a broker that does not answer costs the lag gauge one round, not the loop

TP = tuple[str, int]


@dataclass(slots=True)
class LagReading:
    """What `LagGauge.read` found: where the group starts on partitions not read yet, and each
    owned partition's end (-1: unknown)."""

    starts: dict[TP, int]
    ends: dict[TP, int]


class LagGauge:
    """The lag of the owned partitions, counted from the last commit, else where the group started."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.starts: dict[TP, int] = {}  # where the group started on each owned partition (this assignment)
        self.ends: dict[TP, int] = {}  # the highest end of each owned partition seen

    def started(self, tp: TP, offset: int) -> None:
        """The sink read `offset` of `tp`: the group starts there unless it was read before."""
        self.starts.setdefault(tp, offset)

    def forget(self, partitions: Iterable[TP]) -> None:
        """Assigned anew or no longer owned: where it started and its end are asked again."""
        for tp in partitions:
            self.starts.pop(tp, None)
            self.ends.pop(tp, None)

    def update(self, committed: Mapping[TP, int | None], paused: Collection[TP]) -> None:
        """`apply` what `read` finds, both here (the sink reads on its Kafka thread, applies on its loop)."""
        self.apply(committed, self.read(committed, paused, self.unknown(committed)))

    def unknown(self, owned: Collection[TP]) -> list[TP]:
        """The owned partitions whose start is not known: not read yet, so not committed by the sink
        either (e.g. paused before their first fetch); `read` asks where the group starts on them."""
        return [tp for tp in owned if tp not in self.starts]

    def read(self, owned: Collection[TP], paused: Collection[TP], unknown: Collection[TP]) -> LagReading:
        """Ask for what the gauge needs; changes nothing here. A partition's end is the cached one of
        its last fetch, else the broker's: while it is paused (not fetched, its cached end stands
        still as the topic grows) or before its first fetch. Where the group starts on the `unknown`
        partitions: its committed offset, else the beginning (auto.offset.reset=earliest)."""
        reading = LagReading(self._look_up_starts(unknown), {})
        ask = True  # a broker that does not answer is asked no more this round
        for tp in owned:
            _low, high = self.consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
            if ask and (high < 0 or tp in paused):
                bounds = self._broker_bounds(TopicPartition(*tp))
                ask, high = bounds is not None, max(high, bounds[1] if bounds else -1)
            reading.ends[tp] = high
        return reading

    def apply(self, committed: Mapping[TP, int | None], reading: LagReading) -> None:
        """Set the gauge for the owned partitions (`committed`: the sink's last commit of each, if any).

        Counted from the sink's last commit or, before it, from where the group started (the first
        offset read, else what `reading` found), never from the read position, which runs ahead of
        delivery; to the highest end seen of each."""
        for tp, start in reading.starts.items():
            if tp in committed:
                self.starts.setdefault(tp, start)
        total = 0
        for tp, position in committed.items():
            high = self.ends[tp] = max(reading.ends.get(tp, -1), self.ends.get(tp, -1))
            base = position if position is not None else self.starts.get(tp)
            if base is not None and high >= 0:
                total += max(0, high - base)
        LAG.set(total)

    def _look_up_starts(self, unknown: Collection[TP]) -> dict[TP, int]:
        starts: dict[TP, int] = {}
        asked = [TopicPartition(*tp) for tp in unknown]
        try:
            for p in self.consumer.committed(asked, timeout=LAG_QUERY_TIMEOUT) if asked else []:
                bounds = (p.offset, -1) if p.offset >= 0 else self._broker_bounds(p)
                if bounds is None:
                    break
                starts[(p.topic, p.partition)] = bounds[0]
        except KafkaException as e:
            log.debug("cannot read where the group starts, for the lag: %s", e)
        return starts

    def _broker_bounds(self, tp: TopicPartition) -> tuple[int, int] | None:
        """(low, high) of a partition as the broker has them now; None when it does not answer in time."""
        try:
            return self.consumer.get_watermark_offsets(tp, timeout=LAG_QUERY_TIMEOUT, cached=False)
        except KafkaException as e:
            log.debug("cannot read the ends of %s[%d] for the lag: %s", tp.topic, tp.partition, e)
            return None
