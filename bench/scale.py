"""Bench: scale-out. The same input through 1, 2, 3 and 6 workers of one group; each worker's share.

    .venv/bin/python bench/scale.py [--bootstrap 127.0.0.1:19093] [--records 100000]
        [--log-partitions 12] [--workers 1,2,3,6] [--skewed-workers 2,3,6] [--seed 5]

Two logs of --log-partitions partitions each:

- even: a uniform generator (not the simulator) writes runs of four records (RunStarted, an
  input, an output, RunEnded) round-robin over the log partitions, so each holds the same count;
- skewed: the seeded simulator (``olstream.eventlog.simulate``) with about as many records; its
  busiest log partition is named.

For each worker count N, a fresh records topic: ``olstream source`` first runs over an empty log
of the same partition count, so it creates the topic (as many partitions as the log) and fixes
its placement. N ``olstream worker`` replicas (one --app-id, each its own --client-id and metrics
port) then join; once the group is stable (N members, every input partition assigned), the source
publishes the log. Every record is therefore processed by a stable group; the assignment is read
again at the end, and a rebalance in between is reported.

Per N it prints total records/s (first record processed -> last, summed over the workers'
metrics), each worker's share of the records and the busiest worker's share against the ideal
1/N (goal: <= 1.25/N for N >= 2 on the even log). It also prints the spread of each topic over its
Kafka partitions: the records topic, and the lineage topic (``openlineage.events``'s role), keyed
by root job. The machine may be shared: judge balance by the shares, throughput as measured.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from olstream.contract import codec  # noqa: E402
from olstream.contract.records import (  # noqa: E402
    DatasetDeclared,
    Direction,
    Record,
    RunEnded,
    RunStarted,
    RunStatus,
)
from olstream.devkit.process import free_port  # noqa: E402
from olstream.eventlog.simulate import simulate  # noqa: E402
from olstream.eventlog.stores import open_store  # noqa: E402

T0 = datetime(2026, 3, 1, tzinfo=UTC)
RECORDS_PER_RUN = 4
WORKFLOW_TYPES = 24
SIMULATED_RECORDS_PER_RUN = 4.7


def uniform_log(path: Path, records: int, partitions: int) -> dict[int, int]:
    """Runs of four records, round-robin over the log partitions; records per log partition."""
    store = open_store(f"sqlite:///{path}", partitions=partitions, create=True)
    runs = -(-records // (RECORDS_PER_RUN * partitions)) * partitions  # whole rounds: every partition alike
    next_offset = dict.fromkeys(range(partitions), 0)
    batch: list[tuple[int, bytes]] = []
    try:
        for i in range(runs):
            p = i % partitions
            rid = f"uniform-{i}"
            start = T0 + timedelta(seconds=i)
            wtype = f"flow{i % WORKFLOW_TYPES}"
            off = next_offset[p]
            run: list[Record] = [
                RunStarted(p, off, start, rid, "tenant", "bench", wtype, "1", f"{wtype}-{i}", start),
                DatasetDeclared(
                    p,
                    off + 1,
                    start,
                    rid,
                    Direction.INPUT,
                    "in",
                    "postgres://db:5432",
                    f"s.in{i % 50}",
                    start,
                ),
                DatasetDeclared(
                    p, off + 2, start, rid, Direction.OUTPUT, "out", "postgres://db:5432", f"s.out{i}", start
                ),
                RunEnded(p, off + 3, start, rid, RunStatus.COMPLETED, start + timedelta(seconds=30)),
            ]
            next_offset[p] = off + RECORDS_PER_RUN
            batch.extend((p, codec.encode(r)) for r in run)
            if len(batch) >= 20_000 or i == runs - 1:
                store.append_many([(part, lambda _off, b=b: b) for part, b in batch])
                batch = []
        return {p: store.heads()[p] + 1 for p in store.partitions()}
    finally:
        store.close()


def simulated_log(path: Path, records: int, partitions: int, seed: int) -> dict[int, int]:
    store = open_store(f"sqlite:///{path}", partitions=partitions, create=True)
    try:
        simulate(store, int(records / SIMULATED_RECORDS_PER_RUN), seed=seed, batch_size=20_000)
        return {p: store.heads()[p] + 1 for p in store.partitions()}
    finally:
        store.close()


def empty_log(path: Path, partitions: int) -> None:
    open_store(f"sqlite:///{path}", partitions=partitions, create=True).close()


def metric(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M))


def records_done(port: int) -> float | None:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    return metric(text, "olstream_stream_records_total")


@dataclass(frozen=True)
class Worker:
    client_id: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path


def assignment(admin: AdminClient, group: str, topic: str) -> tuple[str, dict[str, tuple[int, ...]]]:
    """(group state, client id -> input partitions it holds)."""
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    owned: dict[str, tuple[int, ...]] = {}
    for m in desc.members:
        tps = m.assignment.topic_partitions if m.assignment else []
        owned[m.client_id] = tuple(sorted(tp.partition for tp in tps or [] if tp.topic == topic))
    return getattr(desc.state, "name", str(desc.state)), owned


def end_offsets(admin: AdminClient, topic: str) -> list[int]:
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    meta = admin.list_topics(topic, timeout=10).topics[topic]
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in meta.partitions}  # type: ignore[no-untyped-call]
    ends = {
        tp.partition: f.result().offset for tp, f in admin.list_offsets(request, request_timeout=10).items()
    }
    return [ends[p] for p in sorted(ends)]


def run_source(bootstrap: str, log: Path, topic: str, work: Path) -> None:
    cmd = [
        sys.executable, "-m", "olstream", "source", "--bootstrap", bootstrap, "--log", f"sqlite:///{log}",
        "--topic", topic, "--until-idle", "--idle-seconds", "0.5", "--check", "header",
    ]  # fmt: skip
    with (work / "source.log").open("ab") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=ENV, timeout=1800, check=False)
    if done.returncode != 0:
        raise SystemExit(f"source exited {done.returncode}; see {work / 'source.log'}")


def start_workers(bootstrap: str, topic: str, group: str, n: int, work: Path) -> list[Worker]:
    workers = []
    for i in range(n):
        client_id, port = f"{group}-w{i + 1}", free_port()
        log = work / f"{client_id}.log"
        cmd = [
            sys.executable, "-m", "olstream", "worker", "--bootstrap", bootstrap, "--app-id", group,
            "--client-id", client_id, "--data-dir", str(work / client_id), "--input-topic", topic,
            "--output-topic", f"{topic}.lineage", "--errors-topic", f"{topic}.stream-errors",
            "--metrics-port", str(port),
        ]  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=ENV)
        workers.append(Worker(client_id, port, proc, log))
    return workers


def stop_workers(workers: list[Worker]) -> None:
    for w in workers:
        if w.proc.poll() is None:
            w.proc.send_signal(signal.SIGTERM)
    for w in workers:
        try:
            w.proc.wait(60)
        except subprocess.TimeoutExpired:
            w.proc.kill()
            w.proc.wait()


@dataclass(frozen=True)
class Result:
    workers: int
    records: int
    seconds: float
    shares: dict[str, float]
    held: dict[str, tuple[int, ...]]
    stable_throughout: bool
    records_spread: list[int]
    lineage_spread: list[int]

    @property
    def busiest(self) -> float:
        return max(self.shares.values())


def run_one(bootstrap: str, log: Path, total: int, n: int, partitions: int, work: Path, label: str) -> Result:
    tag = uuid.uuid4().hex[:6]
    topic = f"bench.scale.{label}.n{n}.{tag}"
    group = f"scale-{label}-n{n}-{tag}"
    empty = work / f"empty-{partitions}.db"
    if not empty.exists():
        empty_log(empty, partitions)
    run_source(bootstrap, empty, topic, work)  # creates the topic, fixes its placement
    admin = AdminClient({"bootstrap.servers": bootstrap})
    workers = start_workers(bootstrap, topic, group, n, work)
    try:
        deadline = time.monotonic() + 300
        while True:  # stable: N members, every input partition assigned, every worker serving metrics
            if any(w.proc.poll() is not None for w in workers):
                raise SystemExit(f"a worker exited early; see {work}")
            state, held = assignment(admin, group, topic)
            covered = sorted(p for ps in held.values() for p in ps)
            serving = all(records_done(w.port) is not None for w in workers)
            if state == "STABLE" and len(held) == n and covered == list(range(partitions)) and serving:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"group {group} did not settle: {state} {held}")
            time.sleep(0.5)
        time.sleep(2.0)  # the members' own rebalance callbacks have run
        state, held = assignment(admin, group, topic)
        run_source(bootstrap, log, topic, work)
        first = last = None
        counts: dict[str, float] = {}
        deadline = time.monotonic() + 1800
        while True:
            now = time.perf_counter()
            counts = {w.client_id: records_done(w.port) or 0.0 for w in workers}
            done = sum(counts.values())
            if first is None and done > 0:
                first = (now, done)
            if done >= total:
                last = now
                break
            if time.monotonic() > deadline or any(w.proc.poll() is not None for w in workers):
                raise SystemExit(f"workers stopped at {done:,.0f} of {total:,} records; see {work}")
            time.sleep(0.2)
        after_state, after = assignment(admin, group, topic)
        assert first is not None and last is not None
        seconds = max(last - first[0], 1e-6)
        time.sleep(2.0)  # the lineage of the last batch reaches its topic
        return Result(
            workers=n,
            records=total,
            seconds=seconds,
            shares={c: counts[c] / sum(counts.values()) for c in sorted(counts)},
            held=held,
            stable_throughout=after == held and after_state == "STABLE",
            records_spread=end_offsets(admin, topic),
            lineage_spread=end_offsets(admin, f"{topic}.lineage"),
        )
    finally:
        stop_workers(workers)


def spread_text(counts: list[int]) -> str:
    total = sum(counts) or 1
    return " ".join(f"{100 * c / total:.0f}" for c in counts) + f" (max {100 * max(counts) / total:.1f}%)"


def report(title: str, per_log_partition: dict[int, int], results: list[Result], *, goal: bool) -> None:
    total = sum(per_log_partition.values())
    hot = max(per_log_partition, key=lambda p: per_log_partition[p])
    print(f"\n### {title}: {total:,} records over {len(per_log_partition)} log partitions")
    per = " ".join(str(per_log_partition[p]) for p in sorted(per_log_partition))
    print(
        f"records per log partition: {per}; "
        f"busiest: log partition {hot} with {100 * per_log_partition[hot] / total:.1f}% "
        f"(even: {100 / len(per_log_partition):.1f}%)"
    )
    print()
    print("| workers | records/s | each worker's share (%) | busiest | ideal 1/N | busiest x N | stable |")
    print("|---:|---:|---|---:|---:|---:|---|")
    for r in results:
        shares = " / ".join(f"{100 * s:.1f}" for s in r.shares.values())
        print(
            f"| {r.workers} | {r.records / r.seconds:,.0f} | {shares} | {100 * r.busiest:.1f}% | "
            f"{100 / r.workers:.1f}% | {r.busiest * r.workers:.2f} | "
            f"{'yes' if r.stable_throughout else 'NO'} |"
        )
    if goal:
        met = all(r.busiest * r.workers <= 1.25 for r in results if r.workers >= 2)
        print(f"\ngoal (busiest <= 1.25/N for N >= 2): {'met' if met else 'NOT met'}")
    print()
    for r in results:
        held = "; ".join(f"{c.rsplit('-', 1)[-1]}: {list(ps)}" for c, ps in r.held.items())
        print(f"N={r.workers}: input partitions held: {held}")
    r = results[-1]
    print(f"records topic, % per Kafka partition: {spread_text(r.records_spread)}")
    for r in results:
        where = (
            f"N={r.workers}: lineage topic ({len(r.lineage_spread)} partitions, key run:{{ns}}/{{root job}})"
        )
        print(f"{where}, % per partition: {spread_text(r.lineage_spread)}")


ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OLSTREAM_LOG_LEVEL": "INFO"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--bootstrap",
        default=os.environ.get(
            "OLSTREAM_KAFKA_BOOTSTRAP", os.environ.get("OLSTREAM_BOOTSTRAP", "127.0.0.1:19093")
        ),
    )
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--log-partitions", type=int, default=12)
    ap.add_argument("--workers", default="1,2,3,6")
    ap.add_argument(
        "--skewed-workers", default="2,3,6", help="worker counts for the simulated log ('' skips it)"
    )
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    counts = [int(x) for x in args.workers.split(",") if x]
    skewed_counts = [int(x) for x in args.skewed_workers.split(",") if x]

    work = Path(tempfile.mkdtemp(prefix="olstream-bench-scale-"))
    try:
        even_log = work / "even.db"
        even = uniform_log(even_log, args.records, args.log_partitions)
        total = sum(even.values())
        results = [
            run_one(args.bootstrap, even_log, total, n, args.log_partitions, work, "even") for n in counts
        ]
        report("Even log (uniform generator)", even, results, goal=True)
        if skewed_counts:
            skewed_log = work / "skewed.db"
            skewed = simulated_log(skewed_log, args.records, args.log_partitions, args.seed)
            total = sum(skewed.values())
            results = [
                run_one(args.bootstrap, skewed_log, total, n, args.log_partitions, work, "skewed")
                for n in skewed_counts
            ]
            report("Skewed log (the simulator)", skewed, results, goal=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
