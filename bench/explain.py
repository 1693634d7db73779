"""Bench: `olstream explain` on a records topic of about a million records (issue 28: under 30 s).

    .venv/bin/python bench/explain.py --bootstrap 127.0.0.1:PORT [--runs 210000] [--partitions 6]
        [--seed 5] [--events-per-run 2] [--repeat 1] [--scan-threads 4|1,2,4]

Set-up, in fresh topics: a seeded simulated log of --runs runs (``olstream log simulate``'s
workload, 8 log partitions) published to a records topic as the source does (about 4.7 records
per run: 210,000 runs give about 990,000 records); an events topic with --events-per-run filler
events per run (about 1 KB each, with the worker's headers) and, among them, a START and a
COMPLETE of the target run (a run near the end of its partition); a DLQ holding a copy of the
target's COMPLETE without headers (found through its payload's run id); a sink group whose
committed offsets are past every event; a state changelog of half as many writes as records
(other runs' keys) ending with the target's state, as the worker's pure step computes it, so its
events are looked for only in the partition its key hashes to.

Then, each --repeat times, `olstream explain --json` as a subprocess (wall time includes Python's
start-up) for: the target's engine run id, its OpenLineage run id (the events topic read from the
run's start, then the records from there), a workflow instance, and an unknown engine run id (the
whole records topic read, nothing found: exit 2). The table gives messages read per topic and the
seconds: explain's own (``seconds`` in its report) and the process's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from olstream.contract import codec, wire  # noqa: E402
from olstream.contract.records import RunStarted  # noqa: E402
from olstream.operations.explain_match import avro_string, events_partition, ol_run_id  # noqa: E402
from olstream.shared.kafka_admin import ensure_topic  # noqa: E402
from olstream.streams.mapping import event_key  # noqa: E402
from olstream.streams.state_store import dumps_state  # noqa: E402
from tests.support.stream_records import Harness  # noqa: E402
from tests.support.stream_support import produce_rows, simulated_rows  # noqa: E402

PAD = "x" * 700


def event(run_id: str, kind: str, n: int, engine_run_id: str) -> tuple[bytes, list[tuple[str, bytes]]]:
    t = f"2026-01-01T00:00:{n % 60:02d}.000000Z"
    facets = f'"pad":"{PAD}","workflow":{{"engineRunId":"{engine_run_id}"}}'
    value = (
        f'{{"eventTime":"{t}","eventType":"{kind}","run":{{"runId":"{run_id}","facets":{{{facets}}}}},'
        f'"job":{{"namespace":"bench","name":"job-{n % 50}"}},"inputs":[],"outputs":[]}}'
    ).encode()
    headers = [
        (wire.HEADER_RUN_ID, run_id.encode()),
        (wire.HEADER_EVENT_TYPE, kind.encode()),
        (wire.HEADER_EVENT_TIME, t.encode()),
        (wire.HEADER_JOB_NAMESPACE, b"bench"),
        (wire.HEADER_JOB_NAME, f"job-{n % 50}".encode()),
    ]
    return value, headers


def fill_events(
    bootstrap: str,
    topic: str,
    dlq: str,
    runs: int,
    per_run: int,
    target: str,
    target_partition: int,
    target_engine_id: str,
) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "enable.idempotence": True})
    n = 0
    kinds = ["START", *["RUNNING"] * max(0, per_run - 2), "COMPLETE"][:per_run]
    for r in range(runs):
        rid = str(uuid.UUID(int=(0x0190_0000_0000_7000_8000_0000_0000_0000 | r)))
        for kind in kinds:
            value, headers = event(rid, kind, r, f"engine-{r}")
            while True:
                try:
                    p.produce(topic, value, f"run:bench/job-{r % 50}".encode(), headers=headers)
                    break
                except BufferError:
                    p.poll(0.1)
            n += 1
        if r == runs * 9 // 10:  # the target's events, among the others
            for kind in ("START", "COMPLETE"):
                value, headers = event(target, kind, r, target_engine_id)
                p.produce(topic, value, b"run:bench/target", target_partition, headers=headers)
                n += 1
    value, _ = event(target, "COMPLETE", 0, target_engine_id)
    p.produce(dlq, value, b"run:bench/target", 0)  # a DLQ copy without headers
    assert p.flush(120) == 0
    return n


def fill_changelog(
    bootstrap: str, topic: str, writes: int, partitions: int, key: bytes, value: bytes, home: int
) -> None:
    """`writes` state writes of other runs over the partitions (a changelog before compaction), the
    target's last among its home partition's."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "enable.idempotence": True})
    for i in range(writes):
        while True:
            try:
                p.produce(topic, value, f"{i % 8}:filler-{i}".encode(), i % partitions)
                break
            except BufferError:
                p.poll(0.1)
    p.produce(topic, value, key, home)
    assert p.flush(120) == 0


def commit_everything(bootstrap: str, topic: str, group: str, partitions: int) -> None:
    """Commit the end offsets of `topic` for `group` (a group nobody runs), so every event is 'past'."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        ends = [
            TopicPartition(topic, p, c.get_watermark_offsets(TopicPartition(topic, p))[1])
            for p in range(partitions)
        ]
        c.commit(offsets=ends, asynchronous=False)
    finally:
        c.close()


def explain(
    bootstrap: str, subject: str, topics: list[str], threads: int
) -> tuple[int, float, dict[str, object]]:
    began = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "olstream",
            "explain",
            subject,
            "--json",
            "--bootstrap",
            bootstrap,
            "--scan-threads",
            str(threads),
            *topics,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=ROOT,
    )
    wall = time.monotonic() - began
    doc = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr.strip()}
    return done.returncode, wall, doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--bootstrap",
        default=os.environ.get(
            "OLSTREAM_KAFKA_BOOTSTRAP", os.environ.get("OLSTREAM_BOOTSTRAP", "127.0.0.1:9092")
        ),
    )
    ap.add_argument("--runs", type=int, default=210_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--events-per-run", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--scan-threads", default="4", help="consumers per scan; a comma-separated list runs each"
    )
    args = ap.parse_args()
    tag = uuid.uuid4().hex[:6]
    records, events = f"bench-explain.{tag}.records", f"bench-explain.{tag}.events"
    dlq, group = f"{events}.dlq", f"bench-explain.{tag}.sink"

    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        rows, _summary = simulated_rows(Path(tmp), args.runs, args.seed)
    print(
        f"simulated {args.runs:,} runs: {len(rows):,} records in {time.monotonic() - began:.1f} s", flush=True
    )
    starts = [
        (row, codec.decode(row.payload))
        for row in rows
        if codec.peek_record_name(row.payload) == "RunStarted"
    ]
    per_partition = Counter(row.partition for row, _ in starts)
    busiest = per_partition.most_common(1)[0][0]
    mine = [r for row, r in starts if row.partition == busiest]
    target = mine[len(mine) * 9 // 10]
    assert isinstance(target, RunStarted)
    target_id = ol_run_id(target)
    needle = avro_string(target.engine_run_id)
    harness = Harness()
    for row in rows:
        if row.partition == target.partition and needle in row.payload:
            record = codec.decode(row.payload)
            if record.engine_run_id == target.engine_run_id:
                harness.feed(record)
    state = harness.state(target.engine_run_id, target.partition)
    changelog = f"bench-{tag}-runs-changelog"

    began = time.monotonic()
    ensure_topic(args.bootstrap, records, args.partitions)
    ensure_topic(args.bootstrap, events, args.partitions)
    ensure_topic(args.bootstrap, dlq, args.partitions)
    produced = produce_rows(args.bootstrap, records, rows)
    home = target.partition % args.partitions  # the records topic's placement: modulo
    ensure_topic(args.bootstrap, changelog, args.partitions, {"cleanup.policy": "compact"})
    fill_changelog(
        args.bootstrap,
        changelog,
        len(rows) // 2,
        args.partitions,
        state.key.encode(),
        dumps_state(state),
        home,
    )
    target_partition = events_partition(event_key(state), args.partitions)
    n_events = fill_events(
        args.bootstrap,
        events,
        dlq,
        args.runs,
        args.events_per_run,
        target_id,
        target_partition,
        target.engine_run_id,
    )
    commit_everything(args.bootstrap, events, group, args.partitions)
    print(
        f"published {produced:,} records, {n_events:,} events in {time.monotonic() - began:.1f} s", flush=True
    )

    topics = [
        "--records-topic",
        records,
        "--events-topic",
        events,
        "--dlq-topic",
        dlq,
        "--app-id",
        f"bench-{tag}",
    ]
    cases = [
        ("engine run id", target.engine_run_id),
        ("OpenLineage run id", target_id),
        ("workflow instance", target.workflow_instance),
        ("unknown engine run id", f"no-such-run-{tag}"),
    ]
    rows_out = []
    for threads in [int(t) for t in args.scan_threads.split(",")]:
        for _ in range(args.repeat):
            for name, subject in cases:
                rc, wall, doc = explain(args.bootstrap, subject, topics, threads)
                read: dict[str, list[float]] = {}
                for cost in doc.get("costs", []):  # type: ignore[attr-defined]
                    seen = read.setdefault(cost["topic"], [0, 0.0, 0])
                    seen[0] += cost["messages"]
                    seen[1] += cost["seconds"]
                    seen[2] = max(seen[2], cost["partitions"])
                runs = doc.get("runs", [])
                found = f"{len(runs)} runs" if rc == 0 else f"exit {rc}"  # type: ignore[arg-type]
                events_seen = sum(len(r["events"]) for r in runs)  # type: ignore[union-attr]
                dead = sum(len(r["dead_letters"]) for r in runs)  # type: ignore[union-attr]
                cells = [str(threads), name, found, str(events_seen), str(dead)]
                for topic in (records, events, changelog):
                    n, secs, parts = read.get(topic, [0, 0.0, 0])
                    cells.append(f"{int(n):,} ({int(parts)} p) {secs:.1f} s" if n else "-")
                total = doc.get("seconds")
                cells += ["-" if total is None else f"{total:.2f}", f"{wall:.2f}"]  # type: ignore[str-format]
                rows_out.append(cells)
    print()
    print(
        f"records topic: {produced:,} messages over {args.partitions} partitions; "
        f"events topic: {n_events:,}; changelog: {len(rows) // 2 + 1:,}"
    )
    head = (
        "scan threads",
        "case",
        "found",
        "events",
        "DLQ copies",
        "records read",
        "events read",
        "changelog read",
        "explain s",
        "wall s",
    )
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for cells in rows_out:
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
