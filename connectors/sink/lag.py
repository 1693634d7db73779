"""The sink's lag gauge, kept apart from its loop (`sink.Sink` is a `LagGauge`) for its size."""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client import Gauge

from olstream.connectors.sink.delivery import ContiguousCommitTracker

log = logging.getLogger(__name__)

LAG = Gauge("olstream_sink_lag", "Events on the topic not yet committed by the sink (owned partitions)")
LAG_QUERY_TIMEOUT = 1.0  # s; a broker that does not answer costs the lag gauge one round, not the loop

TP = tuple[str, int]


class LagGauge:
    consumer: Consumer
    trackers: dict[TP, ContiguousCommitTracker]
    starts: dict[TP, int]  # where the group started on each owned partition (this assignment)
    ends: dict[TP, int]  # the highest end of each owned partition seen
    paused: set[TP]

    def _update_lag(self) -> None:
        """`olstream_sink_lag`: events on the owned partitions that the group has not committed.

        Counted from the sink's last commit or, before it, from where the group started (the first
        offset read, else its committed offset, else the beginning: auto.offset.reset=earliest),
        never from the read position, which runs ahead of delivery. A partition's end is the cached
        one of its last fetch, else the broker's: while it is paused (not fetched, its cached end
        stands still as the topic grows) or before its first fetch; the highest end seen counts.
        """
        self._look_up_starts()
        total, ask = 0, True  # a broker that does not answer is asked no more this round
        for tp, tracker in self.trackers.items():
            _low, high = self.consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
            if ask and (high < 0 or tp in self.paused):
                bounds = self._broker_bounds(TopicPartition(*tp))
                ask, high = bounds is not None, max(high, bounds[1] if bounds else -1)
            high = self.ends[tp] = max(high, self.ends.get(tp, -1))
            base = tracker.committed if tracker.committed is not None else self.starts.get(tp)
            if base is not None and high >= 0:
                total += max(0, high - base)
        LAG.set(total)

    def _look_up_starts(self) -> None:
        """Where the group starts on partitions not read yet (so not committed by the sink either; e.g.
        paused before their first fetch): its committed offset, else the beginning (auto.offset.reset)."""
        unknown = [TopicPartition(*tp) for tp in self.trackers if tp not in self.starts]
        try:
            for p in self.consumer.committed(unknown, timeout=LAG_QUERY_TIMEOUT) if unknown else []:
                bounds = (p.offset, -1) if p.offset >= 0 else self._broker_bounds(p)
                if bounds is None:
                    return
                if (p.topic, p.partition) in self.trackers:
                    self.starts.setdefault((p.topic, p.partition), bounds[0])
        except KafkaException as e:
            log.debug("cannot read where the group starts, for the lag: %s", e)

    def _broker_bounds(self, tp: TopicPartition) -> tuple[int, int] | None:
        """(low, high) of a partition as the broker has them now; None when it does not answer in time."""
        try:
            return self.consumer.get_watermark_offsets(tp, timeout=LAG_QUERY_TIMEOUT, cached=False)
        except KafkaException as e:
            log.debug("cannot read the ends of %s[%d] for the lag: %s", tp.topic, tp.partition, e)
            return None
