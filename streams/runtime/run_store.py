"""The run-state table on disk: one RocksDB database per assigned input partition, restored from its
changelog partition with a read_committed consumer.

The worker owns its table instead of faust's: a batch's state is written here only after the batch
was made durable in Kafka (its changelog writes acknowledged, and under ``exactly_once`` its
transaction committed), and a restore reads only committed changelog writes. So neither a batch that
never completed nor an aborted transaction (a fenced worker's, one aborted on a broker's failover)
can leave a trace in a store or in a replica restored from the changelog: ``faust``'s own restore
reads the changelog uncommitted unless faust's own exactly-once mode is on.

Each database keeps, in the same atomic write batch as the states, the next changelog offset it has
not applied (`NEXT_CHANGELOG_OFFSET`), so a restart or a partition that comes back restores only the
changelog's tail. A database whose offset lies past its changelog partition's end (the changelog was
deleted and recreated) is wiped and restored from the beginning. With ``--standby-states on`` the
databases of the partitions the worker does not own are kept warm by its standby
(``olstream.streams.runtime.standby``), which hands one over before `assign` opens it.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Collection, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from olstream.shared.errors import InfrastructureError
from olstream.shared.kafka_admin import retrying
from olstream.shared.kafka_clients import Kafka, consumer_config

log = logging.getLogger(__name__)

NEXT_CHANGELOG_OFFSET = b"\x00olstream.next-changelog-offset"
"""The key of the next changelog offset a store has not applied (no run or mark key starts with NUL)."""

RESTORE_BATCH = 5000  # changelog messages applied per write batch during a restore
RESTORE_TIMEOUT_SECONDS = 300.0  # a restore that reads nothing for this long fails
RESTORE_POLL_SECONDS = 0.05
"""A fetch's wait: a fetch returns after it, or with `RESTORE_BATCH` messages. A changelog whose
tail is only transaction markers is done after one wait, so this is what every restart pays."""
WATERMARK_TIMEOUT_SECONDS = 60.0  # how long a changelog partition may be without a leader at a restore

# Memory of each partition's database, bounded (RocksDB's defaults are 64 MiB write buffers and an
# 8 MiB block cache): the live table is small (open runs, and finished ones until --retention),
# and most reads hit the partition transaction's changes or the decoded-state cache (docs/worker.md,
# design notes).
WRITE_BUFFER_BYTES = 4 * 1024 * 1024
WRITE_BUFFERS = 2
BLOCK_CACHE_BYTES = 8 * 1024 * 1024

Writes = Sequence[tuple[bytes, bytes | None]]  # key, value (None: delete)


def _offset_bytes(offset: int) -> bytes:
    return offset.to_bytes(8, "big")


class PartitionStore:
    """One input partition's states and marks, and how far its changelog partition is applied."""

    def __init__(self, path: Path) -> None:
        from rocksdict import BlockBasedOptions, Cache, Options, Rdict

        path.parent.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_write_buffer_size(WRITE_BUFFER_BYTES)
        options.set_max_write_buffer_number(WRITE_BUFFERS)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(BLOCK_CACHE_BYTES))
        options.set_block_based_table_factory(table)
        self.path = path
        self._db = Rdict(str(path), options)

    @property
    def next_changelog_offset(self) -> int:
        raw = self._db.get(NEXT_CHANGELOG_OFFSET)
        return 0 if raw is None else int.from_bytes(raw, "big")

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(key)
        return value

    def write(self, writes: Writes, next_changelog_offset: int | None) -> None:
        """Apply `writes` and, with them, the next changelog offset not applied (one atomic batch)."""
        from rocksdict import WriteBatch

        batch = WriteBatch(raw_mode=True)
        for key, value in writes:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        if next_changelog_offset is not None:
            batch.put(NEXT_CHANGELOG_OFFSET, _offset_bytes(next_changelog_offset))
        self._db.write(batch)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        for key, value in self._db.items():
            assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
            if key != NEXT_CHANGELOG_OFFSET:
                yield key, value

    def close(self) -> None:
        self._db.close()


class Standby(Protocol):
    """Copies of the partitions the worker does not own (``olstream.streams.runtime.standby``)."""

    def release(self, partitions: Collection[int]) -> None: ...
    def follow_others(self, owned: Collection[int]) -> None: ...
    def close(self) -> None: ...


class NoStandby:
    """``--standby-states off``: no copies; a partition new to the worker restores its whole changelog."""

    def release(self, partitions: Collection[int]) -> None:
        pass

    def follow_others(self, owned: Collection[int]) -> None:
        pass

    def close(self) -> None:
        pass


class RunStore:
    """The run-state table: a `PartitionStore` per assigned input partition under
    ``{data_dir}/run-states/{changelog topic}/``, restored from the changelog when assigned."""

    def __init__(
        self, kafka: Kafka, data_dir: str, changelog: str, group: str, standby: Standby | None = None
    ) -> None:
        self.kafka = kafka
        self.changelog = changelog
        self.root = Path(data_dir) / "run-states" / changelog
        self.group = group
        self.stores: dict[int, PartitionStore] = {}
        self.standby: Standby = standby or NoStandby()  # keeps the stores of the other partitions

    # ------------------------------------------------------------------ reads and writes

    def get(self, partition: int, key: bytes) -> bytes | None:
        return self.stores[partition].get(key)

    def write(self, partition: int, writes: Writes, next_changelog_offset: int | None) -> None:
        self.stores[partition].write(writes, next_changelog_offset)

    def items(self, partitions: Iterable[int]) -> Iterator[tuple[bytes, bytes]]:
        for partition in sorted(partitions):
            store = self.stores.get(partition)
            if store is not None:
                yield from store.items()

    # ------------------------------------------------------------------ assignment

    def assign(self, partitions: Iterable[int]) -> None:
        """Open the stores of `partitions` and bring each up to its changelog partition's committed end
        (blocking: run it off the event loop); close the stores of partitions no longer assigned.

        The standby hands its copies of `partitions` over first (closed, nothing of it writes them any
        more), and takes the others after the restore, the ones closed here included."""
        wanted = set(partitions)
        self.standby.release(wanted)
        for gone in sorted(set(self.stores) - wanted):
            self.stores.pop(gone).close()
        for partition in sorted(wanted - set(self.stores)):
            self.stores[partition] = PartitionStore(self.root / str(partition))
        if wanted:
            self._restore(sorted(wanted))
        self.standby.follow_others(wanted)

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
        self.stores.clear()

    def _restore(self, partitions: list[int]) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer(
            consumer_config(
                self.kafka,
                f"{self.group}.restore",
                {"isolation.level": "read_committed", "enable.partition.eof": True, "fetch.wait.max.ms": 20},
            )
        )
        started = time.monotonic()
        try:
            ends: dict[int, int] = {}
            starts: list[TopicPartition] = []
            for p in partitions:
                tp = TopicPartition(self.changelog, p)
                # a broker failing over answers NOT_LEADER_FOR_PARTITION until a new leader is elected
                low, high = retrying(
                    partial(consumer.get_watermark_offsets, tp, timeout=10),
                    f"reading the end offsets of {self.changelog}[{p}]",
                    WATERMARK_TIMEOUT_SECONDS,
                )
                start = self.stores[p].next_changelog_offset
                if start > high:  # the changelog was recreated: this copy belongs to another one
                    log.warning(
                        "run states of input partition %d are applied up to changelog offset %d, past "
                        "the end (%d) of %s[%d]: the changelog was recreated; restoring from its start",
                        p,
                        start,
                        high,
                        self.changelog,
                        p,
                    )
                    self._wipe(p)
                    start = 0
                if start < high:
                    ends[p] = high
                    starts.append(TopicPartition(self.changelog, p, max(start, low)))
            if not ends:
                return
            consumer.assign(starts)
            applied = self._read(consumer, ends)
        except KafkaException as e:
            raise InfrastructureError(f"cannot restore the run states from {self.changelog}: {e}") from e
        finally:
            consumer.close()
        log.info(
            "run states of input partitions %s restored from %s: %d changelog writes in %.1f s",
            sorted(ends),
            self.changelog,
            applied,
            time.monotonic() - started,
        )

    def _read(self, consumer: Any, ends: dict[int, int]) -> int:
        """Apply every committed changelog write up to each partition's end offset (read before)."""
        from confluent_kafka import KafkaError, TopicPartition

        left = dict(ends)
        applied = 0
        quiet_since = time.monotonic()
        while left:
            messages = consumer.consume(RESTORE_BATCH, RESTORE_POLL_SECONDS)
            writes: dict[int, list[tuple[bytes, bytes | None]]] = {}
            last: dict[int, int] = {}
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        log.warning("restoring %s: %s", self.changelog, err)
                    continue
                p, key = msg.partition(), msg.key()
                if p not in left or key is None:
                    continue
                writes.setdefault(p, []).append((key, msg.value()))
                last[p] = msg.offset()
            for p, batch in writes.items():
                self.stores[p].write(batch, last[p] + 1)
                applied += len(batch)
            # a read_committed position passes transaction markers and aborted writes
            for tp in consumer.position([TopicPartition(self.changelog, p) for p in left]):
                if tp.offset >= left[tp.partition]:
                    store = self.stores[tp.partition]
                    if store.next_changelog_offset < tp.offset:
                        store.write((), tp.offset)
                    del left[tp.partition]
            if messages:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > RESTORE_TIMEOUT_SECONDS:
                raise InfrastructureError(
                    f"restoring {self.changelog}: nothing read for {RESTORE_TIMEOUT_SECONDS:.0f} s, "
                    f"partitions {sorted(left)} short of offsets {left}"
                )
        return applied

    def _wipe(self, partition: int) -> None:
        store = self.stores.pop(partition)
        store.close()
        shutil.rmtree(store.path, ignore_errors=True)
        self.stores[partition] = PartitionStore(store.path)
