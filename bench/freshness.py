"""Bench: freshness, from a record's commit to the event log to its event's arrival at the receiver.

    .venv/bin/python bench/freshness.py [--bootstrap 127.0.0.1:19092] [--rate 100] [--seconds 60]
        [--partitions 6] [--run-seconds 0.5]

An engine (this process, through the writer API `olstream.eventlog.writer`) appends runs to a fresh
SQLite log at a steady rate: every 10 ms the runs due by then, each a `RunStarted`, a
`DatasetDeclared` (output) and, `--run-seconds` later, its `RunEnded` (three records per run, as a
live engine writes them: its start and its end in separate commits). Source, one worker and sink run
as processes with their defaults, into a local receiver (the test suite's `tests/support/receiver.py`,
answering at once), over topics and groups of their own.

It prints, per event type, the p50/p90/p99/max of (receiver arrival - the record's commit to the
log), and where the time went, per event and stage:

- log -> records topic: the records topic's message timestamp (the source's produce) - the commit;
- records topic -> events topic: the events topic's message timestamp (the worker's produce) - the
  record's message timestamp;
- events topic -> receiver: the arrival - the event's message timestamp.

Every time is the machine's wall clock (message timestamps are CreateTime, set by the producing
client on this machine). The bench fails when an event is missing after the engine stops.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from olstream.contract import codec  # noqa: E402
from olstream.contract.records import RunEnded, RunStarted  # noqa: E402
from olstream.eventlog.stores import open_store  # noqa: E402
from olstream.eventlog.writer import EventLogWriter, RunHandle  # noqa: E402
from tests.support.receiver import Receiver  # noqa: E402

OLSTREAM = [sys.executable, "-m", "olstream"]
TICK = 0.01  # s between the engine's appends
TERMINAL = ("COMPLETE", "FAIL", "ABORT")


@dataclass
class Engine:
    """Appends runs at `rate` per second for `seconds`; notes each record's commit time (wall clock)."""

    writer: EventLogWriter
    rate: float
    seconds: float
    run_seconds: float
    committed: dict[tuple[str, str], float] = field(default_factory=dict)  # (engine run id, type) -> time
    runs: int = 0

    def run(self) -> None:
        started = time.monotonic()
        open_runs: list[tuple[float, RunHandle]] = []
        while True:
            now = time.monotonic()
            due = int((now - started) * self.rate) if now - started < self.seconds else self.runs
            new: list[RunHandle] = []
            with self.writer.batch():
                for i in range(self.runs, due):
                    run = self.writer.run_started(
                        namespace="freshness",
                        workflow_type=f"flow_{i % 20}",
                        workflow_version="1",
                        workflow_instance=f"instance-{i % 60}",
                        task_id=f"task-{i}",
                    )
                    run.dataset_output("out", "s3://bench", f"table_{i % 50}")
                    new.append(run)
            committed_at = time.time()
            for run in new:
                self.committed[(run.engine_run_id, "RunStarted")] = committed_at
                open_runs.append((now + self.run_seconds, run))
            self.runs = due
            ending = [run for end_at, run in open_runs if end_at <= now]
            if ending:
                open_runs = [(end_at, run) for end_at, run in open_runs if end_at > now]
                with self.writer.batch():
                    for run in ending:
                        run.run_ended("completed")
                committed_at = time.time()
                for run in ending:
                    self.committed[(run.engine_run_id, "RunEnded")] = committed_at
            if not open_runs and now - started >= self.seconds:
                return
            time.sleep(max(0.0, TICK - (time.monotonic() - now)))


def read_topic(bootstrap: str, topic: str) -> list[object]:
    """Every message of `topic` (read_committed), from the beginning to its end."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    try:
        parts = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[object] = []
        done: set[int] = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + 60
        while len(done) < len(parts) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=1.0):
                if msg.error() is None:
                    out.append(msg)
            for tp in consumer.position([TopicPartition(topic, p) for p in parts if p not in done]):
                if tp.offset >= ends[tp.partition]:
                    done.add(tp.partition)
        return out
    finally:
        consumer.close()


def header(msg: object, name: str) -> str | None:
    for key, value in msg.headers() or []:  # type: ignore[attr-defined]
        if key == name and value is not None:
            return bytes(value).decode()
    return None


def nearest_rank(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def percentiles(values: list[float]) -> str:
    """`| p50 | p90 | p99 | max |` in milliseconds (nearest rank)."""
    if not values:
        return "| - | - | - | - |"
    ms = sorted(v * 1000 for v in values)
    cells = [nearest_rank(ms, q) for q in (0.5, 0.9, 0.99)] + [ms[-1]]
    return "| " + " | ".join(f"{c:,.0f}" for c in cells) + " |"


def measure(args: argparse.Namespace, guarantee: str) -> None:
    name = f"fresh-{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    log_url = f"sqlite:///{work / 'events.db'}"
    store = open_store(log_url, partitions=args.partitions, create=True)
    records, events = f"{name}.eventlog", f"{name}.events"
    common = ["--bootstrap", args.bootstrap]
    guarantee_flags: list[str] = [] if guarantee == "default" else ["--processing-guarantee", guarantee]
    commands = {
        "source": [*OLSTREAM, "source", "--log", log_url, "--topic", records, *common],
        "worker": [*OLSTREAM, "worker", "--app-id", f"{name}-worker", "--data-dir", str(work / "w"),
                   "--input-topic", records, "--output-topic", events, "--errors-topic", f"{name}.errors",
                   "--partitions", str(args.partitions), *guarantee_flags, *args.worker_flag, *common],
        "sink": [*OLSTREAM, "sink", "--topic", events, "--group", f"{name}-sink",
                 "--dlq-topic", f"{name}.dlq", *common],
    }  # fmt: skip
    receiver = Receiver(validate=False, record=True).start()
    commands["sink"] += ["--url", receiver.url]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENLINEAGE_", "OLSTREAM_"))}
    procs = {}
    for proc_name, cmd in commands.items():
        with (work / f"{proc_name}.log").open("ab") as out:
            procs[proc_name] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        time.sleep(args.warm_up)  # the worker joins its group, the sink its own
        engine = Engine(EventLogWriter(store), args.rate, args.seconds, args.run_seconds)
        thread = threading.Thread(target=engine.run, daemon=True)
        thread.start()
        thread.join()
        expected = 2 * engine.runs
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(arrivals_of(receiver)) < expected:
            for proc_name, proc in procs.items():
                if proc.poll() is not None:
                    raise SystemExit(
                        f"{proc_name} exited {proc.returncode}: see {work / (proc_name + '.log')}"
                    )
            time.sleep(0.5)
        arrived = arrivals_of(receiver)
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(60)
        receiver.close()
    missing = expected - len(arrived)
    if missing > 0:
        raise SystemExit(f"{missing} of {expected} events never arrived (logs in {work})")
    print(f"logs: {work}")

    # where the time went: the records topic's and the events topic's message timestamps
    published: dict[tuple[str, str], float] = {}
    for msg in read_topic(args.bootstrap, records):
        value = msg.value()  # type: ignore[attr-defined]
        if not value:
            continue  # a position marker
        record = codec.decode(value)
        if isinstance(record, (RunStarted, RunEnded)):
            kind = "RunStarted" if isinstance(record, RunStarted) else "RunEnded"
            published.setdefault((record.engine_run_id, kind), msg.timestamp()[1] / 1000)  # type: ignore[attr-defined]
    emitted: dict[tuple[str, str], float] = {}
    for msg in read_topic(args.bootstrap, events):
        run_id, event_type = header(msg, "olstream.run_id"), header(msg, "olstream.event_type")
        if run_id is not None and event_type is not None:
            emitted.setdefault((run_id, event_type), msg.timestamp()[1] / 1000)  # type: ignore[attr-defined]

    total: dict[str, list[float]] = defaultdict(list)
    stages: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (engine_run_id, run_id, event_type), at in arrived.items():
        kind = "RunStarted" if event_type == "START" else "RunEnded"
        commit = engine.committed[(engine_run_id, kind)]
        total[event_type].append(at - commit)
        pub, out = published.get((engine_run_id, kind)), emitted.get((run_id, event_type))
        if pub is not None and out is not None:
            stages[event_type]["log -> records topic"].append(pub - commit)
            stages[event_type]["records topic -> events topic"].append(out - pub)
            stages[event_type]["events topic -> receiver"].append(at - out)

    print(f"\n### {guarantee}: {engine.runs:,} runs at {args.rate:g} runs/s for {args.seconds:g} s "
          f"({3 * engine.runs:,} records), {args.partitions} partitions\n")  # fmt: skip
    print("| event | events | p50 ms | p90 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for event_type in sorted(total):
        print(f"| {event_type} | {len(total[event_type]):,} {percentiles(total[event_type])}")
    print("\n| event | stage | p50 ms | p90 ms | p99 ms | max ms |")
    print("|---|---|---:|---:|---:|---:|")
    for event_type in sorted(stages):
        for stage, values in stages[event_type].items():
            print(f"| {event_type} | {stage} {percentiles(values)}")


def arrivals_of(receiver: Receiver) -> dict[tuple[str, str, str], float]:
    """(engine run id, runId, eventType) -> the first arrival (wall clock) of each event."""
    skew = time.time() - time.monotonic()
    out: dict[tuple[str, str, str], float] = {}
    for request in receiver.requests:
        try:
            doc = json.loads(request.body)
        except ValueError:
            continue
        for event in doc if isinstance(doc, list) else [doc]:
            engine_run_id = event["run"]["facets"]["workflow"]["engineRunId"]
            out.setdefault(
                (engine_run_id, event["run"]["runId"], event["eventType"]), request.received_at + skew
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--rate", type=float, default=100.0, help="runs appended per second")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the engine appends")
    parser.add_argument("--run-seconds", type=float, default=0.5, help="a run's duration (start to end)")
    parser.add_argument("--partitions", type=int, default=6, help="event-log and records-topic partitions")
    parser.add_argument("--warm-up", type=float, default=15.0, help="s before the engine starts")
    parser.add_argument(
        "--processing-guarantee",
        action="append",
        help="the worker's guarantee, once per value (default: the worker's own default only)",
    )
    parser.add_argument(
        "--worker-flag",
        action="append",
        default=[],
        help="a flag for the worker, e.g. --worker-flag=--batch-seconds=0.1",
    )
    args = parser.parse_args()
    for guarantee in args.processing_guarantee or ["default"]:
        measure(args, guarantee)


if __name__ == "__main__":
    main()
