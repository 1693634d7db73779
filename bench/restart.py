"""Bench: how soon a restarted worker, or a replica joining one, emits new events over N records.

    .venv/bin/python bench/restart.py [--records 1000000 5000000] [--new-runs 300]
        [--bootstrap 127.0.0.1:19092] [--partitions 6] [--seed 5] [--timeout 900] [--keep]

Per N of --records (issue 40), on fresh topics and a fresh app id:

1. History: a seeded simulated log (``olstream.eventlog.simulate``, 8 log partitions) of about N
   records is published to the records topic as the source connector does (bench/stream.py: key =
   log partition, the topic's placement, the source's headers, the log's heads on every RunStarted).
   One worker (``olstream worker``, its own --data-dir) processes it; once the group has committed
   every input offset it is stopped with SIGTERM.
2. New runs: before each scenario --new-runs new runs (a START and a COMPLETE each) are appended to
   the log and published with the log's new heads. Every third one is a child of an old run (one of
   the last starts of the history) on another log partition, named by engine run id only, as the
   simulator's cross-partition children are: only the run directory can find its parent.
3. Scenarios, timed from the worker process's start (its Python start-up included), reading the
   output topic from its end as it was before the start:

   - ``data dir``: the stopped worker restarted with its data dir;
   - ``fresh dir``: the same app id with an empty --data-dir (a pod rescheduled without its volume);
   - ``replica``: worker A is started with the first data dir, and a warm-up batch of new runs waits
     until A emits all of them (A processes, children included). Then replica B starts, in the same
     group with an empty --data-dir. Once the group is stable with B holding input partitions (asked
     of the broker: ``describe_consumer_groups``), the scenario's new runs are published; the row
     counts only the runs on B's input partitions, so it measures how long partitions moved to a
     worker that never held them wait (timed from B's start). Publishing earlier would let A process
     them before the rebalance took its partitions. A's partitions are printed under the table.

Per scenario: seconds to the first new event, to the first event of a new child of an old run on
another log partition, and to the last new event (every new run's START and COMPLETE seen); the
records the run directory read on start and the run states' changelog writes restored (both from
the worker's log: "-" when it has no such line; for the replica, B's log); and the new children
whose events all carry a parent facet naming their old parent's run id, of all new children.
With --keep the work directory printed at the start (the log, the workers' logs and data dirs)
stays; it is removed otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer as KafkaConsumer  # noqa: E402
from confluent_kafka import ConsumerGroupState, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from olstream.connectors.source.resume import placement_of  # noqa: E402
from olstream.contract import codec, wire  # noqa: E402
from olstream.contract.records import RunRef, RunStarted, RunStatus  # noqa: E402
from olstream.eventlog.simulate import simulate  # noqa: E402
from olstream.eventlog.store import EventLogStore  # noqa: E402
from olstream.eventlog.stores import open_store  # noqa: E402
from olstream.eventlog.writer import EventLogWriter, RunHandle  # noqa: E402
from olstream.shared.kafka_admin import ensure_topic  # noqa: E402
from olstream.shared.produce import produce  # noqa: E402
from olstream.streams.runid import run_id  # noqa: E402
from tests.support.stream_support import headers_for, start_worker, stop, tail, worker_cmd  # noqa: E402

RECORDS_PER_RUN = 4.745  # the simulator's mean (200,000 runs wrote 949,020 records)
LOG_PARTITIONS = 8
PARENT_POOL = 2000  # rows read back from the end of each log partition for old parents
DIRECTORY_LINE = re.compile(r"run directory: caught up .*: (\d+) records read in ([\d.]+) s")
RESTORE_LINE = re.compile(
    r"run states of input partitions .* restored from \S+: (\d+) changelog writes in ([\d.]+) s"
)
REBALANCE_LINE = re.compile(r"rebalance complete: input partitions \[([\d, ]*)\]")


@dataclass(frozen=True)
class OldStart:
    engine_run_id: str
    partition: int
    ol_run_id: str  # the OpenLineage run id a child's parent facet must name


@dataclass(frozen=True)
class NewRun:
    engine_run_id: str
    log_partition: int
    kafka_partition: int
    parent: OldStart | None  # an old run on another log partition, named by engine run id only


@dataclass
class Batch:
    label: str
    runs: dict[str, NewRun]

    def expected(self, only: set[int] | None = None) -> set[tuple[str, str]]:
        """(engine run id, event type) of every event the batch's runs (on `only` input partitions) emit."""
        return {
            (rid, kind)
            for rid, run in self.runs.items()
            if only is None or run.kafka_partition in only
            for kind in ("START", "COMPLETE")
        }


@dataclass
class Seen:
    """The new events a scenario read: (engine run id, event type) -> seconds after the worker's start."""

    at: dict[tuple[str, str], float] = field(default_factory=dict)
    parent_ok: dict[str, bool] = field(default_factory=dict)  # child -> every event named its parent


@dataclass
class Row:
    records: int
    scenario: str
    first: float | None
    first_child: float | None
    last: float | None
    children_ok: int
    children: int
    directory: str
    restored: str


class SimulatedLog:
    """A simulated SQLite event log, extended by batches of new runs and published as the source does."""

    def __init__(self, work: Path, records: int, seed: int) -> None:
        self.store: EventLogStore = open_store(
            f"sqlite:///{work / 'log.db'}", partitions=LOG_PARTITIONS, create=True
        )
        self.runs = max(10, round(records / RECORDS_PER_RUN))
        summary = simulate(self.store, self.runs, seed)
        self.records = summary.records
        self.now = summary.last_time
        self.rng = random.Random(f"bench-restart-{seed}")  # not the simulator's: its ids would repeat
        self.writer = EventLogWriter(self.store, clock=lambda: self.now)
        self.published = {p: -1 for p in self.store.partitions()}
        self.old = self._old_starts()

    def _old_starts(self) -> list[OldStart]:
        """The last starts of every log partition: parents young enough for --parent-retention."""
        out = []
        for p, head in self.store.heads().items():
            for stored in self.store.read(p, max(-1, head - PARENT_POOL), PARENT_POOL):
                if codec.peek_record_name(stored.payload) != "RunStarted":
                    continue
                r = codec.decode(stored.payload, stored.partition, stored.offset)
                assert isinstance(r, RunStarted)
                ol = run_id(r.namespace, r.workflow_type, r.workflow_instance, r.engine_run_id, r.start_time)
                out.append(OldStart(r.engine_run_id, p, ol))
        return out

    def tick(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now

    def append(self, label: str, count: int, placement: Callable[[int], int]) -> Batch:
        """`count` new runs, all started then all completed; every third a child of an old run."""
        runs: list[tuple[NewRun, RunHandle]] = []
        with self.writer.batch():
            for i in range(count):
                instance = f"restart-{label}-{i}"
                partition = self.writer.partition_for(instance)
                parent = None
                if i % 3 == 2:
                    parent = self.rng.choice([o for o in self.old if o.partition != partition])
                rid = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
                self.tick()
                handle = self.writer.run_started(
                    namespace="commerce", workflow_type="restart_probe", workflow_version="1",
                    workflow_instance=instance, task_id="acme-eu", engine_run_id=rid,
                    parent=None if parent is None else RunRef(engine_run_id=parent.engine_run_id),
                )  # fmt: skip
                runs.append((NewRun(rid, partition, placement(partition), parent), handle))
            for _, handle in runs:
                self.tick()
                handle.run_ended(RunStatus.COMPLETED)
        return Batch(label, {run.engine_run_id: run for run, _ in runs})

    def publish(self, bootstrap: str, topic: str) -> int:
        """Publish every row not yet published, with the log's heads on each RunStarted (as the source)."""
        heads = self.store.heads()
        raw_heads = wire.encode_heads(heads)
        placement = placement_of(bootstrap, topic)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
        n = 0
        for p in self.store.partitions():
            after, key = self.published[p], str(p).encode()
            while after < heads[p]:
                for stored in (rows := self.store.read(p, after, 10_000)):
                    headers: list[tuple[str, str | bytes | None]] = [
                        *headers_for(stored.partition, stored.offset, stored.payload, raw_heads)
                    ]
                    produce(producer, topic, key, stored.payload, headers, placement.kafka_partition(p))
                    n += 1
                after = rows[-1].offset
                producer.poll(0)
            self.published[p] = after
        assert producer.flush(120) == 0
        return n

    def close(self) -> None:
        self.store.close()


class Follower:
    """Reads a topic from its end as it is now; stamps each message with its arrival."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.c = KafkaConsumer(
            {"bootstrap.servers": bootstrap, "group.id": f"bench-follow-{uuid.uuid4().hex[:8]}",
             "enable.auto.commit": False, "isolation.level": "read_committed"}
        )  # fmt: skip
        parts = self.c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = [self.c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts]
        self.c.assign([TopicPartition(topic, p, end) for p, end in zip(parts, ends, strict=True)])

    def read(self, seen: Seen, batch: Batch, t0: float, seconds: float = 0.2) -> None:
        for m in self.c.consume(10_000, seconds):
            if m.error() is not None:
                continue
            now = time.perf_counter() - t0
            doc = json.loads(m.value() or b"{}")
            rid = doc["run"]["facets"]["workflow"]["engineRunId"]
            run = batch.runs.get(rid)
            if run is None:
                continue
            seen.at.setdefault((rid, doc["eventType"]), now)
            if run.parent is not None:
                named = doc["run"]["facets"].get("parent", {}).get("run", {}).get("runId")
                seen.parent_ok[rid] = seen.parent_ok.get(rid, True) and named == run.parent.ol_run_id

    def close(self) -> None:
        self.c.close()


@dataclass
class Topics:
    bootstrap: str
    app_id: str
    src: str
    out: str
    err: str

    def cmd(self, data_dir: Path, client_id: str) -> list[str]:
        return [*worker_cmd(self.bootstrap, self.app_id, data_dir, self.src, self.out, self.err),
                "--client-id", client_id]  # fmt: skip


def committed_everything(bootstrap: str, group: str, topic: str) -> bool:
    c = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        parts = list(c.list_topics(topic, timeout=10).topics[topic].partitions)
        for tp in c.committed([TopicPartition(topic, p) for p in parts], timeout=10):
            high = c.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)[1]
            if high > 0 and tp.offset < high:
                return False
        return True
    finally:
        c.close()


def assigned_to(admin: AdminClient, group: str, client_id: str, topic: str) -> set[int] | None:
    """The input partitions the broker says `client_id` holds once the group is stable (None before)."""
    try:
        group_info = admin.describe_consumer_groups([group])[group].result(timeout=10)
    except Exception:
        return None
    if group_info.state != ConsumerGroupState.STABLE:
        return None
    for member in group_info.members:
        if member.client_id == client_id and member.assignment is not None:
            mine = {tp.partition for tp in member.assignment.topic_partitions if tp.topic == topic}
            return mine or None
    return None


def watch(
    follower: Follower,
    batch: Batch,
    t0: float,
    procs: Iterable[tuple[subprocess.Popen[bytes], Path]],
    timeout: float,
    seen: Seen | None = None,
) -> Seen:
    """Read new events until every event of the batch arrived (or `timeout` s after t0)."""
    seen = seen or Seen()
    want = batch.expected()
    while not want <= seen.at.keys():
        for proc, log in procs:
            if proc.poll() is not None:
                raise SystemExit(f"worker exited {proc.returncode} in {batch.label}:\n{tail(log)}")
        if time.perf_counter() - t0 > timeout:
            print(
                f"  {batch.label}: {len(want - seen.at.keys())} of {len(want)} events missing at the timeout"
            )
            break
        follower.read(seen, batch, t0)
    return seen


def from_log(log: Path) -> tuple[str, str]:
    """(records the run directory read on start, changelog writes restored), as the worker logged them."""
    text = log.read_text(errors="replace")
    d = DIRECTORY_LINE.search(text)
    directory = f"{int(d.group(1)):,} in {float(d.group(2)):.1f} s" if d else "-"
    restores = RESTORE_LINE.findall(text)
    writes, seconds = sum(int(w) for w, _ in restores), sum(float(s) for _, s in restores)
    return directory, f"{writes:,} in {seconds:.1f} s" if restores else "-"


def row(
    records: int, scenario: str, batch: Batch, seen: Seen, log: Path, only: set[int] | None = None
) -> Row:
    runs = {rid: r for rid, r in batch.runs.items() if only is None or r.kafka_partition in only}
    times = [t for (rid, _), t in seen.at.items() if rid in runs]
    children = [rid for rid, r in runs.items() if r.parent is not None]
    child_times = [t for (rid, _), t in seen.at.items() if rid in children]
    complete = batch.expected(only) <= seen.at.keys()
    return Row(
        records, scenario, min(times, default=None), min(child_times, default=None),
        max(times) if complete and times else None,
        sum(seen.parent_ok.get(rid, False) for rid in children), len(children), *from_log(log),
    )  # fmt: skip


def secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_row(r: Row, header: bool = False) -> None:
    if header:
        print(
            "| records | scenario | first new event s | first new child s | last new event s "
            "| children with parent | directory read on start | changelog writes restored |"
        )
        print("|---:|---|---:|---:|---:|---:|---|---|")
    print(
        f"| {r.records:,} | {r.scenario} | {secs(r.first)} | {secs(r.first_child)} | {secs(r.last)} "
        f"| {r.children_ok}/{r.children} | {r.directory} | {r.restored} |"
    )


def restart(
    topics: Topics, log: SimulatedLog, batch: Batch, data_dir: Path, log_path: Path, timeout: float
) -> Seen:
    """Publish the batch, start one worker on `data_dir`, read until every new event arrived, stop it."""
    follower = Follower(topics.bootstrap, topics.out)
    log.publish(topics.bootstrap, topics.src)
    t0 = time.perf_counter()
    proc = start_worker(topics.cmd(data_dir, f"bench-{batch.label}"), log_path)
    try:
        return watch(follower, batch, t0, [(proc, log_path)], timeout)
    finally:
        stop(proc, signal.SIGTERM, 60)
        follower.close()


def replica(
    topics: Topics,
    log: SimulatedLog,
    new_batch: Callable[[str], Batch],
    dirs: tuple[Path, Path],
    logs: tuple[Path, Path],
    timeout: float,
) -> tuple[Batch, Seen, set[int], bool]:
    """Worker A on its data dir processes a warm-up batch; replica B joins with an empty data dir; once
    B holds input partitions, a new batch is appended and published. Returns it, its events (timed
    from B's start), B's input partitions and whether B still held them at the end (the broker's
    view and B's log)."""
    admin = AdminClient({"bootstrap.servers": topics.bootstrap})
    follower = Follower(topics.bootstrap, topics.out)
    warm_up = new_batch("warm-up")
    log.publish(topics.bootstrap, topics.src)
    t_a = time.perf_counter()
    a = start_worker(topics.cmd(dirs[0], "bench-replica-a"), logs[0])
    procs: list[tuple[subprocess.Popen[bytes], Path]] = [(a, logs[0])]
    try:
        warmed = watch(follower, warm_up, t_a, procs, timeout)
        print(f"  replica: A emitted the warm-up batch {secs(max(warmed.at.values(), default=None))} s after "
              "its start")  # fmt: skip
        t0 = time.perf_counter()
        b = start_worker(topics.cmd(dirs[1], "bench-replica-b"), logs[1])
        procs.append((b, logs[1]))
        mine = None
        while mine is None:
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"replica B got no input partitions in {timeout:.0f} s:\n{tail(logs[1])}")
            if b.poll() is not None:
                raise SystemExit(f"replica B exited {b.returncode}:\n{tail(logs[1])}")
            time.sleep(0.2)
            mine = assigned_to(admin, topics.app_id, "bench-replica-b", topics.src)
        held = time.perf_counter() - t0
        print(f"  replica: B holds input partitions {sorted(mine)} {held:.1f} s after its start")
        batch = new_batch("replica")
        log.publish(topics.bootstrap, topics.src)
        seen = watch(follower, batch, t0, procs, timeout)
        # B may have lost its partitions meanwhile: a restore longer than the session timeout gets it
        # dropped from the group (docs/limits.md), A takes them back, and the row would time A's work
        kept = assigned_to(admin, topics.app_id, "bench-replica-b", topics.src) == mine
        final = REBALANCE_LINE.findall(logs[1].read_text(errors="replace"))
        if final and {int(p) for p in final[-1].split(",") if p.strip()} != mine:
            kept = False
        if not kept:
            print(f"  replica: B no longer holds input partitions {sorted(mine)}: the row times A, not B")
        return batch, seen, mine, kept
    finally:
        for proc, _ in reversed(procs):
            stop(proc, signal.SIGTERM, 60)
        follower.close()


def bench(bootstrap: str, records: int, args: argparse.Namespace, work: Path) -> list[Row]:
    tag = uuid.uuid4().hex[:8]
    topics = Topics(bootstrap, f"bench-restart-{tag}", f"bench.restart.{tag}", f"bench.restart.{tag}.out",
                    f"bench.restart.{tag}.errors")  # fmt: skip
    ensure_topic(bootstrap, topics.src, args.partitions)

    started = time.perf_counter()
    log = SimulatedLog(work, records, args.seed)
    built = time.perf_counter() - started
    started = time.perf_counter()
    n = log.publish(bootstrap, topics.src)
    published = time.perf_counter() - started
    print(f"{log.records:,} records of {log.runs:,} simulated runs: simulated in {built:.0f} s, "
          f"published in {published:.0f} s")  # fmt: skip
    assert n == log.records

    placement = placement_of(bootstrap, topics.src).kafka_partition
    dirs = {name: work / name for name in ("data", "fresh", "replica-b")}
    started = time.perf_counter()
    proc = start_worker(topics.cmd(dirs["data"], "bench-history"), work / "history.log")
    try:
        while not committed_everything(bootstrap, topics.app_id, topics.src):
            if proc.poll() is not None:
                raise SystemExit(f"worker exited {proc.returncode}:\n{tail(work / 'history.log')}")
            if time.perf_counter() - started > 6 * 3600:
                raise SystemExit("the history was not processed in 6 hours")
            time.sleep(1)
        processed = time.perf_counter() - started
    finally:
        stop(proc, signal.SIGTERM, 60)
    print(f"history processed by one worker in {processed:.0f} s ({log.records / processed:,.0f} records/s, "
          "start-up included); "
          f"stopped in {time.perf_counter() - started - processed:.0f} s")  # fmt: skip

    rows = []
    batch = log.append("data", args.new_runs, placement)
    seen = restart(topics, log, batch, dirs["data"], work / "data.log", args.timeout)
    rows.append(row(log.records, "data dir", batch, seen, work / "data.log"))
    print_row(rows[-1], header=True)

    batch = log.append("fresh", args.new_runs, placement)
    seen = restart(topics, log, batch, dirs["fresh"], work / "fresh.log", args.timeout)
    rows.append(row(log.records, "fresh dir", batch, seen, work / "fresh.log"))
    print_row(rows[-1])

    def new_batch(label: str) -> Batch:
        return log.append(label, 30 if label == "warm-up" else args.new_runs, placement)

    logs = (work / "replica-a.log", work / "replica-b.log")
    batch, seen, mine, kept = replica(
        topics, log, new_batch, (dirs["data"], dirs["replica-b"]), logs, args.timeout
    )
    scenario = "replica joins (B's partitions)" if kept else "replica joins: INVALID, B lost its partitions"
    rows.append(row(log.records, scenario, batch, seen, logs[1], mine))
    print_row(rows[-1])
    others = set(range(args.partitions)) - mine
    theirs = row(log.records, "A's partitions", batch, seen, logs[0], others)
    print(f"  replica: A's partitions {sorted(others)}: first new event {secs(theirs.first)} s, "
          f"last {secs(theirs.last)} s after B's start")  # fmt: skip
    log.close()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--bootstrap",
        default=os.environ.get(
            "OLSTREAM_KAFKA_BOOTSTRAP", os.environ.get("OLSTREAM_BOOTSTRAP", "127.0.0.1:19092")
        ),
    )
    ap.add_argument("--records", type=int, nargs="+", default=[1_000_000, 5_000_000])
    ap.add_argument("--new-runs", type=int, default=300, help="new runs appended before each scenario")
    ap.add_argument("--partitions", type=int, default=6, help="partitions of the records topic")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds a scenario may take")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, data dirs, log)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the workers on the way out

    rows: list[Row] = []
    for records in args.records:
        work = Path(tempfile.mkdtemp(prefix=f"olstream-bench-restart-{records}-"))
        print(f"--- {records:,} records (work directory {work})")
        try:
            rows.extend(bench(args.bootstrap, records, args, work))
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        print()
    print(f"Seconds after the worker's process start; {args.new_runs} new runs per scenario "
          "(a third of them children of old runs on other log partitions)")  # fmt: skip
    for i, r in enumerate(rows):
        print_row(r, header=i == 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
