"""`olstream status`: each topic's end offsets and each consumer group's lag, source to stream to sink,
and per partition of each group's topics: its records, its lag and the member that owns it (a hot
partition or an idle worker shows at a glance).

The arithmetic (`group_lags`, `topic_ends`, `partition_rows`) is pure; `collect` asks the broker once
per group.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from olstream.contract import topics
from olstream.shared.errors import InfrastructureError
from olstream.shared.kafka_clients import Kafka, bootstrap_of, client_config

log = logging.getLogger(__name__)

PIPELINE_TOPICS = topics.PIPELINE

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class TopicEnd:
    topic: str
    partitions: int
    end_offsets: tuple[int, ...]  # per partition, in partition order

    @property
    def total(self) -> int:
        return sum(self.end_offsets)


@dataclass(frozen=True)
class GroupLag:
    group: str
    topic: str
    committed: int  # sum over partitions of the committed offsets (0 where none)
    end: int
    partitions_without_commit: int

    @property
    def lag(self) -> int:
        return max(0, self.end - self.committed)


@dataclass(frozen=True)
class GroupState:
    state: str  # STABLE, EMPTY, PREPARING_REBALANCE, ...
    members: int


@dataclass(frozen=True)
class PartitionRow:
    """One partition of a topic a group reads: its records, the group's position, its owner."""

    group: str
    topic: str
    partition: int
    end: int  # the partition's end offset: the records it ever received
    committed: int  # the group's committed offset, -1 without one
    owner: str | None  # the member that holds it now (client id and host), None when unassigned
    share: float  # of the topic's records (sum of end offsets)

    @property
    def lag(self) -> int:
        return max(0, self.end - max(0, self.committed))


@dataclass(frozen=True)
class PipelineStatus:
    topics: tuple[TopicEnd, ...]
    groups: tuple[GroupLag, ...]
    missing_topics: tuple[str, ...]
    group_states: tuple[tuple[str, GroupState], ...] = ()
    partitions: tuple[PartitionRow, ...] = ()

    def state_of(self, group: str) -> GroupState | None:
        return dict(self.group_states).get(group)


def topic_ends(ends: Mapping[TopicPartitionKey, int]) -> list[TopicEnd]:
    by_topic: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in ends.items():
        by_topic.setdefault(topic, {})[partition] = offset
    return [
        TopicEnd(topic, len(parts), tuple(parts[p] for p in sorted(parts)))
        for topic, parts in sorted(by_topic.items())
    ]


def group_lags(
    ends: Mapping[TopicPartitionKey, int], committed: Mapping[str, Mapping[TopicPartitionKey, int]]
) -> list[GroupLag]:
    """Per (group, topic): committed vs end offsets over the topic's partitions.

    A partition without a commit (offset < 0) counts as committed at 0 (everything is lag)."""
    rows: list[GroupLag] = []
    for group in sorted(committed):
        offsets = committed[group]
        topics = sorted({t for t, _ in offsets if any(t == et for et, _ in ends)})
        for topic in topics:
            parts = sorted(p for t, p in ends if t == topic)
            done = [offsets.get((topic, p), -1) for p in parts]
            rows.append(
                GroupLag(
                    group=group,
                    topic=topic,
                    committed=sum(max(0, o) for o in done),
                    end=sum(ends[(topic, p)] for p in parts),
                    partitions_without_commit=sum(
                        1 for o, p in zip(done, parts, strict=True) if o < 0 and ends[(topic, p)] > 0
                    ),
                )
            )
    return rows


def partition_rows(
    ends: Mapping[TopicPartitionKey, int],
    committed: Mapping[str, Mapping[TopicPartitionKey, int]],
    owners: Mapping[str, Mapping[TopicPartitionKey, str]],
) -> list[PartitionRow]:
    """Per (group, topic, partition) of every topic in `ends` the group committed on or is assigned."""
    totals: dict[str, int] = {}
    for (topic, _p), end in ends.items():
        totals[topic] = totals.get(topic, 0) + end
    rows: list[PartitionRow] = []
    for group in sorted(set(committed) | set(owners)):
        offsets, owned = committed.get(group, {}), owners.get(group, {})
        read = {t for t, _ in (*offsets, *owned)}
        for topic, partition in sorted(k for k in ends if k[0] in read):
            end = ends[(topic, partition)]
            rows.append(
                PartitionRow(
                    group=group,
                    topic=topic,
                    partition=partition,
                    end=end,
                    committed=offsets.get((topic, partition), -1),
                    owner=owned.get((topic, partition)),
                    share=end / totals[topic] if totals[topic] else 0.0,
                )
            )
    return rows


def member_name(client_id: str, host: str) -> str:
    """How a group member is shown: its client id, and the host it connected from."""
    host = host.lstrip("/")
    return f"{client_id}@{host}" if host else client_id


def collect(kafka: Kafka, topics: Sequence[str] = PIPELINE_TOPICS, timeout: float = 10.0) -> PipelineStatus:
    """Ask the broker for end offsets of `topics` and every consumer group's committed offsets."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]

    admin = AdminClient(client_config(kafka))
    bootstrap = bootstrap_of(kafka)
    try:
        meta = admin.list_topics(timeout=timeout)
        present = [t for t in topics if t in meta.topics and meta.topics[t].error is None]
        missing = tuple(t for t in topics if t not in present)
        request = {TopicPartition(t, p): latest for t in present for p in meta.topics[t].partitions}
        ends: dict[TopicPartitionKey, int] = {}
        if request:
            for tp, fut in admin.list_offsets(request, request_timeout=timeout).items():
                ends[(tp.topic, tp.partition)] = fut.result().offset
        groups = admin.list_consumer_groups(request_timeout=timeout).result()
        committed: dict[str, dict[TopicPartitionKey, int]] = {}
        for listing in groups.valid:
            req = [ConsumerGroupTopicPartitions(listing.group_id)]
            result = admin.list_consumer_group_offsets(req, request_timeout=timeout)
            for fut in result.values():
                parts = fut.result().topic_partitions or []
                committed[listing.group_id] = {(tp.topic, tp.partition): tp.offset for tp in parts}
        lags = group_lags(ends, committed)
        states: dict[str, GroupState] = {}
        owners: dict[str, dict[TopicPartitionKey, str]] = {}
        names = sorted(listing.group_id for listing in groups.valid)
        if names:
            for name, fut in admin.describe_consumer_groups(names, request_timeout=timeout).items():
                desc = fut.result()
                states[name] = GroupState(getattr(desc.state, "name", str(desc.state)), len(desc.members))
                for member in desc.members:
                    assigned = member.assignment.topic_partitions if member.assignment else []
                    for tp in assigned or []:
                        if (tp.topic, tp.partition) in ends:
                            owned = owners.setdefault(name, {})
                            owned[(tp.topic, tp.partition)] = member_name(member.client_id, member.host)
        read = {g.group for g in lags} | set(owners)
        states = {name: state for name, state in states.items() if name in read}
        per_partition = partition_rows(ends, {g: committed[g] for g in committed if g in read}, owners)
    except KafkaException as e:
        raise InfrastructureError(f"cannot read offsets from the broker at {bootstrap}: {e}") from e
    finally:
        admin.poll(0)  # logs librdkafka's queued lines (client_config's logger) before the client goes
    return PipelineStatus(
        topics=tuple(topic_ends(ends)),
        groups=tuple(lags),
        missing_topics=missing,
        group_states=tuple(sorted(states.items())),
        partitions=tuple(per_partition),
    )


def render_tables(status: PipelineStatus, bootstrap: str) -> Iterable[object]:
    """rich Tables for the terminal."""
    from rich.table import Table

    topics = Table(title=f"Topics at {bootstrap}")
    for col in ("topic", "partitions", "end offset (sum)", "per partition"):
        topics.add_column(col, justify="right" if col != "topic" else "left")
    for t in status.topics:
        per = " ".join(str(o) for o in t.end_offsets)
        topics.add_row(t.topic, str(t.partitions), str(t.total), per if len(per) < 60 else per[:57] + "...")
    for name in status.missing_topics:
        topics.add_row(name, "-", "-", "(not created)")
    groups = Table(title="Consumer groups")
    for col in ("group", "state", "members", "topic", "committed", "end", "lag"):
        groups.add_column(col, justify="left" if col in ("group", "state", "topic") else "right")
    for g in status.groups:
        lag = (
            str(g.lag)
            if not g.partitions_without_commit
            else f"{g.lag} ({g.partitions_without_commit} p. uncommitted)"
        )
        state = status.state_of(g.group)
        members = str(state.members) if state else "?"
        groups.add_row(
            g.group, state.state if state else "?", members, g.topic, str(g.committed), str(g.end), lag
        )
    if not status.groups:
        groups.add_row("(none)", "", "", "", "", "", "")
    partitions = Table(title="Partitions of each group's topics (records = end offset; owner = member now)")
    for col in ("group", "topic", "partition", "records", "share", "committed", "lag", "owner"):
        partitions.add_column(col, justify="left" if col in ("group", "topic", "owner") else "right")
    for row in status.partitions:
        partitions.add_row(
            row.group,
            row.topic,
            str(row.partition),
            str(row.end),
            f"{100 * row.share:.1f}%",
            str(row.committed) if row.committed >= 0 else "-",
            str(row.lag),
            row.owner or "(unassigned)",
        )
    if not status.partitions:
        partitions.add_row("(none)", "", "", "", "", "", "", "")
    return (topics, groups, partitions)
