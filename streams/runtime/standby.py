"""Warm standby copies of the run states (``--standby-states on``).

Each worker keeps a copy of the run states of every input partition it does not own: a thread tails
those changelog partitions with its own read_committed consumer (assigned, never subscribed, never
committing) and writes them into the same `PartitionStore` paths the worker's `RunStore` uses
(``{data_dir}/run-states/{changelog}/{partition}``), each with its `NEXT_CHANGELOG_OFFSET` in the
same atomic write batch. When the group gives the worker one of those partitions, `RunStore.assign`
finds the copy and restores only the changelog's tail past it (docs/worker.md, "Scaling and
failure").

The hand-over is `RunStore.assign`'s: it calls `release` with the partitions it is about to open,
which returns only once the standby has closed their stores and no write of its can reach them
(RocksDB opens a path once per process); after its restore it calls `follow_others`, and the thread
adopts every partition the worker does not own, the ones just revoked included, from each store's
next changelog offset. Only committed changelog writes are applied, as a restore applies them: a
fenced worker's or an aborted transaction's writes never reach a copy.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

from olstream.shared.kafka_clients import Kafka, consumer_config
from olstream.streams.runtime.metrics import STANDBY_LAG, STANDBY_PARTITIONS, STANDBY_WRITES
from olstream.streams.runtime.run_store import NoStandby, PartitionStore, Standby
from olstream.streams.settings import WorkerSettings

log = logging.getLogger(__name__)

FETCH = 5000  # changelog messages per fetch (and per write batch at most, per partition)
POLL_SECONDS = 0.2  # a fetch's wait: how soon the thread sees a change of the partitions it follows
LAG_EVERY_SECONDS = 1.0  # how often the lag gauge is computed (from the consumer's cached watermarks)
WATERMARK_TIMEOUT_SECONDS = 10.0

OpenStore = Callable[[Path], PartitionStore]


def standby_states(settings: WorkerSettings, changelog: str, partitions: int) -> Standby:
    """The worker's standby copies: `StandbyStates` with ``--standby-states on``, else nothing."""
    if not settings.standby_states:
        return NoStandby()
    return StandbyStates(settings.connection, settings.app_id, changelog, settings.data_dir, partitions)


class StandbyStates:
    """The copies of the partitions this worker does not own, and the thread that keeps them warm.

    `release` and `follow_others` are called from any thread (the worker's executor); everything
    else runs on the standby's thread. `_lock` guards the open stores: a batch is applied under it,
    and `release` closes a store under it, so a write either lands before `release` returns or never.
    Only the thread opens a store (`_adopt`), and only for a partition `follow_others` asked for and
    no `release` took back since.
    """

    def __init__(
        self,
        kafka: Kafka,
        group: str,
        changelog: str,
        data_dir: str,
        partitions: int,
        *,
        open_store: OpenStore = PartitionStore,
        consumer: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self.changelog = changelog
        self.partitions = partitions
        self.root = Path(data_dir) / "run-states" / changelog  # RunStore's paths
        self._open_store = open_store
        self._make_consumer = consumer
        self._config = consumer_config(
            kafka,
            f"{group}.standby",
            {"isolation.level": "read_committed", "fetch.wait.max.ms": 100, "enable.partition.eof": False},
        )
        self._lock = threading.Lock()
        self._wanted: set[int] = set()  # partitions to keep copies of (follow_others minus releases)
        self._stores: dict[int, PartitionStore] = {}  # open copies (the thread opens, release closes)
        self._next: dict[int, int] = {}  # each open copy's next changelog offset not applied
        self._assigned: set[int] = set()  # the consumer's assignment (the thread's alone)
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lag_at = 0.0

    # ------------------------------------------------------------------ the worker's side

    def release(self, partitions: Collection[int]) -> None:
        """Stop keeping copies of `partitions` and close their stores: when this returns, nothing of the
        standby writes to them until `follow_others` gives them back (the worker opens them next)."""
        handed: dict[int, int] = {}
        with self._lock:
            self._wanted -= set(partitions)
            for p in sorted(set(partitions) & set(self._stores)):
                handed[p] = self._next.pop(p)
                self._stores.pop(p).close()
            STANDBY_PARTITIONS.set(len(self._stores))
        self._changed.set()
        if handed:
            log.info(
                "standby: run states of input partitions %s handed to the worker at changelog offsets %s",
                sorted(handed),
                handed,
            )

    def follow_others(self, owned: Collection[int]) -> None:
        """Keep copies of every input partition but `owned` (the worker's own stores of those others must
        be closed already: `RunStore.assign` calls this after it closed them). Starts the thread."""
        others = set(range(self.partitions)) - set(owned)
        with self._lock:
            self._wanted = others
        self._changed.set()
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="olstream-standby", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread (its consumer closed), then close the copies."""
        self._stop.set()
        self._changed.set()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            self._wanted.clear()
            for store in self._stores.values():
                store.close()
            self._stores.clear()
            self._next.clear()

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        from confluent_kafka import Consumer

        consumer = (self._make_consumer or Consumer)(self._config)
        try:
            while not self._stop.is_set():
                try:
                    self.step(consumer)
                except Exception as e:  # a broker's hiccup, a full disk: the copies wait, the worker goes on
                    log.warning("standby: keeping the run-state copies failed (trying again): %s", e)
                    time.sleep(1.0)
        finally:
            consumer.close()

    def step(self, consumer: Any) -> int:
        """One round of the thread: apply the partitions asked for, then a fetch; the writes applied."""
        if self._changed.is_set():
            self._changed.clear()
            self.reconcile(consumer)
        if not self._assigned:
            STANDBY_LAG.set(0)
            self._changed.wait(POLL_SECONDS)
            return 0
        applied = self.apply(consumer.consume(FETCH, POLL_SECONDS))
        if time.monotonic() - self._lag_at >= LAG_EVERY_SECONDS:
            self._lag_at = time.monotonic()
            self._report_lag(consumer)
        return applied

    def reconcile(self, consumer: Any) -> None:
        """Bring the consumer's assignment to the open copies: unassign the released ones, adopt the
        partitions asked for that have no copy open."""
        from confluent_kafka import TopicPartition

        with self._lock:
            wanted, open_now = set(self._wanted), set(self._stores)
        dropped = self._assigned - open_now
        if dropped:
            consumer.incremental_unassign([TopicPartition(self.changelog, p) for p in sorted(dropped)])
            self._assigned -= dropped
        bounds: dict[int, tuple[int, int]] = {}
        for p in sorted(
            wanted - open_now
        ):  # outside the lock: a release meanwhile must not wait for the broker
            try:
                bounds[p] = consumer.get_watermark_offsets(
                    TopicPartition(self.changelog, p), timeout=WATERMARK_TIMEOUT_SECONDS
                )
            except Exception as e:
                log.warning(
                    "standby: cannot read the end offsets of %s[%d] (asking again): %s", self.changelog, p, e
                )
                self._changed.set()
        if bounds:
            self._adopt(bounds)
        with (
            self._lock
        ):  # every open copy is read from its next offset (an adoption that failed to assign too)
            starts = {p: self._next[p] for p in self._stores if p not in self._assigned}
        if starts:
            consumer.incremental_assign(
                [TopicPartition(self.changelog, p, offset) for p, offset in sorted(starts.items())]
            )
            self._assigned |= set(starts)
            log.info(
                "standby: keeping run states of input partitions %s from changelog offsets %s",
                sorted(starts),
                starts,
            )

    def _adopt(self, bounds: dict[int, tuple[int, int]]) -> None:
        """Open the copies of the partitions still asked for, each from its next offset (the log's start
        when that was removed)."""
        with self._lock:
            for p, (low, high) in sorted(bounds.items()):
                if p not in self._wanted or p in self._stores:  # released while the broker answered
                    continue
                path = self.root / str(p)
                store = self._open_store(path)
                start = store.next_changelog_offset
                if start > high:  # the changelog was recreated: this copy belongs to another one
                    log.warning(
                        "standby: the copy of input partition %d is applied up to changelog offset %d, past "
                        "the end (%d) of %s[%d]: the changelog was recreated; copying it from its start",
                        p,
                        start,
                        high,
                        self.changelog,
                        p,
                    )
                    store.close()
                    shutil.rmtree(path, ignore_errors=True)
                    store = self._open_store(path)
                    start = 0
                self._stores[p] = store
                self._next[p] = max(start, low)
            STANDBY_PARTITIONS.set(len(self._stores))

    def apply(self, messages: Iterable[Any]) -> int:
        """Write the fetched committed changelog messages into the open copies (of a partition released
        meanwhile: nothing); the writes applied."""
        by_partition: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
        for msg in messages:
            err = msg.error()
            if err is not None:
                log.warning("standby: reading %s: %s", self.changelog, err)
                continue
            key = msg.key()
            if key is not None:
                by_partition.setdefault(msg.partition(), []).append((msg.offset(), key, msg.value()))
        applied = 0
        with self._lock:
            for p, rows in by_partition.items():
                store = self._stores.get(p)
                if store is None:
                    continue
                writes = [(key, value) for offset, key, value in rows if offset >= self._next[p]]
                if not writes:
                    continue
                last = rows[-1][0]
                store.write(writes, last + 1)
                self._next[p] = last + 1
                applied += len(writes)
        if applied:
            STANDBY_WRITES.inc(applied)
        return applied

    def _report_lag(self, consumer: Any) -> None:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.changelog, p) for p in sorted(self._assigned)]
        behind = 0
        for tp in consumer.position(tps):
            _, high = consumer.get_watermark_offsets(tp, cached=True)  # from the fetches: no request
            if high >= 0 and tp.offset >= 0:
                behind += max(0, high - tp.offset)
        STANDBY_LAG.set(behind)
