"""The worker's metrics (names and labels documented in docs/operations.md), and the garbage
collector's time as one of them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import cache
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

RECORDS = Counter("olstream_stream_records_total", "Input records processed", ["type"])
EVENTS = Counter("olstream_stream_events_total", "RunEvents emitted (including replays)", ["event_type"])
ERRORS = Counter("olstream_stream_errors_total", "Bad input records sent to the errors topic", ["reason"])
PARENT_NOT_VISIBLE = Counter(
    "olstream_stream_parent_not_visible_total",
    "Child runs emitted without a parent edge: what the edge needs of the parent (its identity, and "
    "with hierarchical job names its job path) is neither on the child's record nor in this worker's state",
)
PARENT_OUTCOMES = Counter(
    "olstream_stream_parent_lookups_total",
    "Child runs whose parent was looked up in the run directory, by outcome: found, absent (not in "
    "the log up to the child's heads, or refused), ambiguous (its engine run id on two or more other "
    "log partitions), too_old (older than --parent-retention)",
    ["outcome"],
)
CHILDREN_WAITING = Gauge(
    "olstream_stream_children_waiting",
    "Child runs waiting for the run directory to read every log partition up to their heads",
)
PARENT_WAIT_SECONDS = Histogram(
    "olstream_stream_parent_wait_seconds",
    "Wall time a child run with heads waited for the run directory before it was processed (every such "
    "child, zero waits included: the START delay the directory adds)",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0),
)
PARENT_WAIT_RECORD_SECONDS = Histogram(
    "olstream_stream_parent_wait_record_seconds",
    "Record time a child run waited: how far behind its append time the directory's newest record was",
    buckets=(0.0, 0.01, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 86400.0),
)
MEMBERSHIP_REFUSED = Counter(
    "olstream_stream_membership_refused_total",
    "Commits the group refused when the worker confirmed its membership before processing a record "
    "(the group had dropped it or was rebalancing): the record waited for the rebalance instead",
)
DIRECTORY_STARTS = Gauge("olstream_stream_directory_runs", "Run starts held by the run directory")
JOB_PATH_TOO_LONG = Counter(
    "olstream_stream_job_path_too_long_total",
    "Child runs whose hierarchical job path would exceed the limit: named by a new path, no parent edge",
)
REDRIVEN = Counter(
    "olstream_stream_redriven_records_total",
    "Error records sent again by olstream errors redrive (olstream.redrive.attempt): processed as new, "
    "past the marks",
)
REPLAYS = Counter(
    "olstream_stream_replayed_records_total", "Records that re-emitted or changed nothing (replays)"
)
EVICTED = Counter("olstream_stream_evicted_runs_total", "Finished runs evicted after the retention window")
RETAINED = Gauge(
    "olstream_stream_finished_runs_retained", "Finished runs kept for replays (retention window)"
)
INPUT_REREAD = Counter(
    "olstream_stream_input_reread_total",
    "Input records fetched but never handed to the agent, found by the commit ledger and read again",
)
FENCES = Counter(
    "olstream_stream_fenced_total",
    "Batches dropped because their transaction could never commit (exactly_once: the group had dropped "
    "this worker, or the broker had aborted the transaction past its timeout)",
)
PRODUCERS_REPLACED = Counter(
    "olstream_stream_producers_replaced_total",
    "Transactional producers replaced (exactly_once: a call that never returned, or fenced for good)",
)
BATCH_SECONDS = Gauge("olstream_stream_last_batch_seconds", "Wall time of the last processed batch")
INPUT_LAG = Gauge(
    "olstream_stream_input_lag",
    "Records of an owned input partition past the group's committed offset (the partition's end offset "
    "minus the commit), per input topic partition; refreshed every 2 s",
    ["partition"],
)
STANDBY_PARTITIONS = Gauge(
    "olstream_stream_standby_partitions",
    "Input partitions whose run states this worker keeps a warm standby copy of (--standby-states on)",
)
STANDBY_WRITES = Counter(
    "olstream_stream_standby_writes_total",
    "Committed changelog writes applied to this worker's standby copies of run states",
)
STANDBY_LAG = Gauge(
    "olstream_stream_standby_lag",
    "Changelog messages the standby copies are behind their partitions' last stable offsets (summed)",
)


@cache
def record_counter(record_type: str) -> Any:
    return RECORDS.labels(record_type)


@cache
def event_counter(event_type: str) -> Any:
    return EVENTS.labels(event_type)


class GarbageCollectionTimer:
    """Adds up each collection's wall time (a `gc.callbacks` entry), exported as the counter
    ``olstream_stream_gc_seconds_total`` by `collect`.

    The callback takes no lock: it runs inside a collection, in whichever thread triggered it, and a
    prometheus_client metric's lock held by that same thread (the metrics server reading it) would
    deadlock it (prometheus/client_python#363). A float's += is atomic under the GIL.
    """

    def __init__(self) -> None:
        self.started = 0.0
        self.seconds = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self.started

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "olstream_stream_gc_seconds",
            "Wall time the worker spent in the cyclic garbage collector (every generation)",
            value=self.seconds,
        )


GC_TIMER = GarbageCollectionTimer()
REGISTRY.register(GC_TIMER)
