"""The faust app of the lineage stream: the input topic faust reads for the agent, its worker process.

faust reads the input and runs the agent, its timers and its rebalance hooks; the run-state table
is the worker's own (``olstream.streams.runtime.run_store``), so that its state follows the batch's
Kafka writes (and transactions) and a restore reads only committed changelog writes. The agent
(``olstream.streams.runtime.agent``) stays thin; everything event-shaped is in
``olstream.streams.processor`` / ``olstream.streams.mapping``, which import no faust.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import faust

from olstream.contract import topics
from olstream.shared.kafka_clients import (
    faust_broker,
    faust_credentials,
)
from olstream.shared.stopping import STOP_SIGNALS, install_stop_deadline, installed_deadline
from olstream.streams.framed_input import InputFraming
from olstream.streams.runtime.input_codec import SingleObjectValues
from olstream.streams.runtime.metrics import GC_TIMER
from olstream.streams.settings import WorkerSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamApp:
    settings: WorkerSettings
    app: faust.App
    input_topic: Any
    output_topic: Any
    errors_topic: Any
    partitions: int
    framing: InputFraming  # how the input's values are read (faust's codec and the run directory)


def build_app(settings: WorkerSettings, partitions: int, framing: InputFraming) -> StreamApp:
    factor, _ = settings.replication.resolved(1)  # resolved by prepare_topics
    app = faust.App(
        settings.app_id,
        broker=faust_broker(settings.connection),
        broker_credentials=faust_credentials(settings.connection),
        broker_client_id=settings.client_id or f"olstream-worker-{socket.gethostname()}-{os.getpid()}",
        store="memory://",  # no faust table: the run states are the worker's own (run_store.py)
        datadir=settings.data_dir,
        processing_guarantee="at_least_once",
        topic_partitions=partitions,
        topic_replication_factor=factor,
        topic_allow_declare=True,
        table_standby_replicas=0,
        web_enabled=False,
        producer_acks=-1,
        producer_linger_ms=5,
        producer_max_batch_size=1_048_576,
        # the changelog carries run states up to --max-event-bytes; a fetch takes a whole one
        producer_max_request_size=settings.max_event_bytes + topics.MESSAGE_HEADROOM_BYTES,
        consumer_max_fetch_size=max(1_048_576, settings.max_event_bytes + topics.MESSAGE_HEADROOM_BYTES),
        consumer_auto_offset_reset="earliest",
        stream_wait_empty=True,  # faust's rebalance waits for its own acks (none on the input: acks=False)
        broker_commit_every=10_000,
        broker_commit_interval=1.0,
        broker_session_timeout=settings.session_timeout,
        consumer_metadata_max_age_ms=int(settings.metadata_refresh * 1000),
        broker_heartbeat_interval=min(3.0, settings.session_timeout / 3),
        key_serializer="raw",
        value_serializer="raw",
    )
    input_topic = app.topic(
        settings.input_topic,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        # both wire formats, as single-object
        value_serializer=SingleObjectValues(settings.input_topic, framing),
        partitions=partitions,
        internal=False,
        acks=False,  # faust never acks, gap-fills or commits the input: the worker's checkpoint does
    )
    output_topic = app.topic(
        settings.output_topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
    )
    errors_topic = app.topic(
        settings.errors_topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
    )
    return StreamApp(settings, app, input_topic, output_topic, errors_topic, partitions, framing)


class StreamWorkerProcess(faust.Worker):
    """faust's worker, with the stop deadline (`olstream.shared.stopping`) chained onto its signals and
    the worker's own SIGUSR1 report.

    mode installs its SIGTERM/SIGINT/SIGUSR1 handlers with `loop.add_signal_handler` in
    `install_signal_handlers` (from the worker's first start); the deadline is chained right after,
    so that faust still sees the signal and runs its own stop, and the process leaves with
    `STOP_TIMEOUT` when that stop does not end within `--stop-timeout` (an agent that never
    returns, a rebalance or shutdown that waits forever for acks). Checked again once the app has
    started, in case anything installed handlers over it meanwhile. SIGUSR1 gets the worker's own
    handler (`on_sigusr1`) in place of mode's, also right after mode's. This subclass and its two
    overrides are declared in `faust_private.ALL_NAMES`.
    """

    stop_timeout: float = 30.0

    #: what SIGUSR1 logs before the threads and tasks are printed (the worker's input positions)
    describe_input: Callable[[], str] | None = None

    def install_signal_handlers(self) -> None:
        super().install_signal_handlers()
        self.chain_stop_deadline()
        # replaces mode's SIGUSR1 handler, which prints the threads and tasks without the input's
        # positions (a loop has one handler per signal: the last one added)
        self.loop.add_signal_handler(signal.SIGUSR1, self.on_sigusr1)

    def chain_stop_deadline(self) -> None:
        if all(installed_deadline(sig) is not None for sig in STOP_SIGNALS):
            return
        install_stop_deadline(self.stop_timeout, "worker")
        log.info("a stop signal leaves after %.1f s at most (--stop-timeout)", self.stop_timeout)

    def on_sigusr1(self) -> None:
        """SIGUSR1 (docs/operations.md): where the worker reads its input, then every thread and task."""
        report_where_it_stands(self.describe_input, sys.stderr)

    async def on_startup_finished(self) -> None:
        await super().on_startup_finished()
        if any(installed_deadline(sig) is None for sig in STOP_SIGNALS):
            log.warning("the stop deadline's signal handlers were replaced: chaining them again")
            self.chain_stop_deadline()


def report_where_it_stands(describe_input: Callable[[], str] | None, file: TextIO) -> None:
    """Log where the worker reads its input (`describe_input`, one warning), then print every
    thread's stack and every task of the running event loop to `file`. Never raises: it is a
    signal handler's diagnosis, and a failing part must not hide the others."""
    try:
        if describe_input is not None:
            log.warning("SIGUSR1: where the worker reads its input:\n%s", describe_input())
    except Exception as e:
        log.warning("SIGUSR1: could not describe the worker's input: %s", e)
    try:
        print_threads_and_tasks(file)
    except Exception as e:
        log.warning("SIGUSR1: could not print the worker's threads and tasks: %s", e)


def print_threads_and_tasks(file: TextIO) -> None:
    """Every thread's stack and, under the thread that runs it, every task of the running event loop,
    laid out as mode's worker printed them on SIGUSR1 (without their local variables, whose reprs
    can be large or raise)."""
    threads = {t.ident: t for t in threading.enumerate()}
    current = threading.get_ident()
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    for ident, frame in sys._current_frames().items():
        thread = threads.get(ident)
        print(f"THREAD {thread.name if thread is not None else ident}", file=file)
        print("=" * 49, file=file)
        traceback.print_stack(frame, file=file)
        if ident == current and loop is not None:
            print("TASKS", file=file)
            print("-" * 49, file=file)
            for task in asyncio.all_tasks(loop):
                print(f"  TASK {task.get_name()} {task.get_coro()!r}", file=file)
                print(f"  {'~' * 49}", file=file)
                task.print_stack(file=file)
        print("\n", file=file)
    file.flush()


# The cyclic garbage collector's thresholds in the worker (CPython's are 700, 10, 10). Nearly every
# object the worker frees is freed by reference counting; with the defaults a full collection, which
# walks every live object (faust, the caches), would run every few seconds and cost a measurable
# share of the worker's time (docs/benchmarks.md "Worker"). The worker's records still free cycles,
# only in fewer passes.
GC_THRESHOLDS = (50_000, 20, 100)


def drop_monitor_sensor(app: Any) -> None:
    """Take faust's Monitor off the app's sensors (public API: ``app.sensors``, ``app.monitor``).

    The Monitor keeps per-event statistics for faust's web pages, which the worker does not serve
    (``web_enabled=False``; its metrics are olstream's own), yet its callbacks run for every event
    (their cost: docs/worker.md). faust adds it when the app starts, before any agent runs; faust's
    own direct calls to ``app.monitor`` still reach it: only its callbacks as a sensor are dropped.
    """
    monitor = app.monitor
    if monitor in set(app.sensors):
        app.sensors.remove(monitor)
        log.debug("faust's Monitor sensor removed (no per-event statistics)")


def worker_process(sa: StreamApp, describe_input: Callable[[], str] | None = None) -> StreamWorkerProcess:
    """The faust worker that runs the app (logging stays olstream's own); the objects built so far are
    left out of later garbage collections (`gc.freeze`), collections run less often
    (`GC_THRESHOLDS`), and their time is counted (`GC_TIMER`)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    if GC_TIMER not in gc.callbacks:
        gc.callbacks.append(GC_TIMER)
    worker = StreamWorkerProcess(
        sa.app, loglevel=logging.getLogger().level, override_logging=False, quiet=True
    )
    worker.stop_timeout = sa.settings.stop_timeout
    worker.describe_input = describe_input
    return worker
