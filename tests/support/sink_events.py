"""RunEvents for sink tests and the sink benchmark, produced straight to a Kafka topic.

Events are variations of the spec's `tests/example_full_event.json`: each run gets its own
runId and a START, RUNNING..., COMPLETE/FAIL sequence with increasing eventTimes; events are
keyed `run:{namespace}/{job name}` the way the stream keys them.

`make_run_trees` builds a more realistic mix (the sink benchmark's skewed workload): run trees
(a root run and its child tasks) whose root jobs follow a seeded Zipf distribution, keyed by the
tree's root job as the worker keys them, each event with the worker's headers (`olstream.run_id`,
`olstream.event_type`, `.event_time`, `.job_namespace`, `.job_name`), in the time order of
overlapping runs. `run_order` checks per-run order at a receiver.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from olstream.contract import wire
from tests.support.openlineage_schema import spec_dir

_SPEC = spec_dir()
EXAMPLE = (_SPEC or Path("/nonexistent")) / "tests" / "example_full_event.json"
BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)


# the worker's header carrying the event's runId (ASCII); the string itself where the contract lacks it
HEADER_RUN_ID: str = getattr(wire, "HEADER_RUN_ID", "olstream.run_id")

TERMINAL = frozenset({"COMPLETE", "FAIL", "ABORT"})
PARENT_FACET_URL = "https://openlineage.io/spec/facets/1-2-0/ParentRunFacet.json#/$defs/ParentRunFacet"


@dataclass(frozen=True)
class LineageRecord:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


def _template() -> dict[str, Any]:
    if EXAMPLE.is_file():
        doc: dict[str, Any] = json.loads(EXAMPLE.read_text())
        doc.pop("dataset", None)  # not part of a RunEvent
        return doc
    return {
        "eventTime": "2023-07-17T10:54:22.355067Z",
        "eventType": "COMPLETE",
        "inputs": [],
        "job": {"facets": {}, "name": "dbt", "namespace": "food_delivery"},
        "outputs": [],
        "producer": "https://github.com/OpenLineage/OpenLineage/tree/0.30.0/integration/airflow",
        "run": {"facets": {}, "runId": "f69a6e9b-9bac-3c9a-9cf6-eacb70ecc9a9"},
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
    }


def make_events(
    runs: int, events_per_run: int = 3, jobs: int = 50, namespace: str = "sinktest"
) -> list[LineageRecord]:
    """`runs` runs of `events_per_run` events each, interleaved run by run in rounds (like a live log)."""
    template = _template()
    per_run: list[list[LineageRecord]] = []
    for r in range(runs):
        job = f"job-{r % jobs}"
        run_id = str(uuid.UUID(int=(0x0190_0000_0000_7000_8000_0000_0000_0000 | r)))
        records = []
        for i in range(events_per_run):
            doc = json.loads(json.dumps(template))
            if i == 0:
                kind = "START"
            elif i == events_per_run - 1:
                kind = "FAIL" if r % 7 == 3 else "COMPLETE"
            else:
                kind = "RUNNING"
            doc["eventType"] = kind
            stamp = BASE_TIME + timedelta(seconds=r, microseconds=i)
            doc["eventTime"] = stamp.isoformat().replace("+00:00", "Z")
            doc["run"]["runId"] = run_id
            doc["job"]["namespace"] = namespace
            doc["job"]["name"] = job
            value = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
            records.append(LineageRecord(f"run:{namespace}/{job}".encode(), value))
        per_run.append(records)
    out: list[LineageRecord] = []
    for i in range(events_per_run):
        out.extend(records[i] for records in per_run)
    return out


def zipf_weights(n: int, exponent: float) -> list[float]:
    """Zipf weights of ranks 1..n (weight of rank k: 1 / k**exponent), normalised to sum 1."""
    raw = [1.0 / (k**exponent) for k in range(1, n + 1)]
    total = sum(raw)
    return [w / total for w in raw]


def make_run_trees(
    runs: int,
    roots: int = 20,
    exponent: float = 1.2,
    seed: int = 7,
    namespace: str = "sinkbench",
    mean_children: float = 2.0,
    mean_task_seconds: float = 3.0,
    tree_gap_seconds: float = 1.0,
) -> list[LineageRecord]:
    """`runs` runs, a START and a COMPLETE each (2 * runs events), grouped in run trees, seeded.

    Each tree is a root run of job `flow_NN@1` (its rank NN drawn from `zipf_weights(roots,
    exponent)`: rank 0 is the hot root job) and about `mean_children` child tasks, jobs
    `flow_NN@1.task_M@1` with a parent facet naming the root run (hierarchical job names). Trees
    start every `tree_gap_seconds` (jittered); tasks start after their root's START and last an
    exponential time of mean `mean_task_seconds`; the root completes after its last task. Every
    event of a tree is keyed `run:{namespace}/{root job}` (the worker's key: the tree's root job)
    and carries the header HEADER_RUN_ID = its own runId. Events come in eventTime order, so runs
    overlap and a run's COMPLETE often follows its START within a few events.
    """
    rng = random.Random(seed)
    template = _template()
    weights = zipf_weights(roots, exponent)
    # (time, sequence, runId, eventType, job name, root job, parent (runId, job) or None)
    timeline: list[tuple[float, int, str, str, str, str, tuple[str, str] | None]] = []
    seq = 0

    def run_id() -> str:
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))

    made = 0
    tree = 0
    while made < runs:
        rank = rng.choices(range(roots), weights)[0]
        root_job = f"flow_{rank:02d}@1"
        children = min(runs - made - 1, int(rng.expovariate(1 / mean_children)) if mean_children else 0)
        start = tree * tree_gap_seconds + rng.uniform(0, tree_gap_seconds)
        root_id = run_id()
        end = start + 0.01
        events: list[tuple[float, str, str, str, tuple[str, str] | None]] = []
        events.append((start, "START", root_id, root_job, None))
        for m in range(children):
            task_start = start + 0.001 + rng.uniform(0, mean_task_seconds)
            task_end = task_start + 0.001 + rng.expovariate(1 / mean_task_seconds)
            task_id = run_id()
            task_job = f"{root_job}.task_{m}@1"
            events.append((task_start, "START", task_id, task_job, (root_id, root_job)))
            events.append((task_end, "COMPLETE", task_id, task_job, (root_id, root_job)))
            end = max(end, task_end + 0.001)
        events.append((end, "COMPLETE", root_id, root_job, None))
        for when, kind, rid, job, parent_ref in events:
            timeline.append((when, seq, rid, kind, job, root_job, parent_ref))
            seq += 1
        made += 1 + children
        tree += 1
    timeline.sort()

    out: list[LineageRecord] = []
    for when, _seq, rid, kind, job, root_job, parent in timeline:
        doc = json.loads(json.dumps(template))
        doc["eventType"] = kind
        stamp = BASE_TIME + timedelta(seconds=round(when, 6))
        doc["eventTime"] = stamp.isoformat().replace("+00:00", "Z")
        doc["run"]["runId"] = rid
        doc["job"]["namespace"] = namespace
        doc["job"]["name"] = job
        if parent is not None:
            parent_id, parent_job = parent
            doc["run"]["facets"]["parent"] = {
                "_producer": doc["producer"],
                "_schemaURL": PARENT_FACET_URL,
                "run": {"runId": parent_id},
                "job": {"namespace": namespace, "name": parent_job},
                "root": {"run": {"runId": parent_id}, "job": {"namespace": namespace, "name": parent_job}},
            }
        value = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
        key = f"run:{namespace}/{root_job}".encode()
        out.append(LineageRecord(key, value, worker_headers(doc)))
    return out


def worker_headers(doc: dict[str, Any]) -> tuple[tuple[str, bytes], ...]:
    """The headers the worker puts on an event (docs/contract.md, events topic)."""
    return (
        (HEADER_RUN_ID, doc["run"]["runId"].encode("ascii")),
        (wire.HEADER_EVENT_TYPE, doc["eventType"].encode("ascii")),
        (wire.HEADER_EVENT_TIME, doc["eventTime"].encode("ascii")),
        (wire.HEADER_JOB_NAMESPACE, doc["job"]["namespace"].encode("utf-8")),
        (wire.HEADER_JOB_NAME, doc["job"]["name"].encode("utf-8")),
    )


@dataclass(frozen=True)
class RunOrder:
    """Per-run order of events as they arrived (see `run_order`)."""

    runs: int  # distinct runIds seen
    out_of_order: int  # runs whose first terminal event arrived before their first START (or without one)
    incomplete: int  # runs missing a START or a terminal event
    duplicates: int  # events that arrived more than once (same runId and eventType)
    early: int  # runs whose terminal event arrived before their START's answer was due (with times)


Arrived = tuple[str, str] | tuple[str, str, float, float]


def run_order(arrivals: Iterable[Arrived]) -> RunOrder:
    """Check events in arrival order: for every run, START before the terminal event.

    Each arrival is (runId, eventType) or, as the receiver's `arrivals` with track_runs,
    (runId, eventType, received_at, answered_at); with times, `early` counts the runs whose
    terminal event arrived before their first START had been answered (sent without waiting).
    """
    first: dict[str, dict[str, tuple[int, float, float]]] = {}
    duplicates = 0
    for i, item in enumerate(arrivals):
        rid, kind = item[0], item[1]
        received, answered = (item[2], item[3]) if len(item) == 4 else (0.0, 0.0)
        seen = first.setdefault(rid, {})
        if kind in seen:
            duplicates += 1
        else:
            seen[kind] = (i, received, answered)
    out_of_order = incomplete = early = 0
    for seen in first.values():
        start = seen.get("START")
        ends = [v for k, v in seen.items() if k in TERMINAL]
        end = min(ends) if ends else None
        if start is None or end is None:
            incomplete += 1
        if end is not None and (start is None or end[0] < start[0]):
            out_of_order += 1
        elif end is not None and start is not None and start[1] < end[1] < start[2]:
            early += 1  # (one batch request holding both, in order, is not early)
    return RunOrder(len(first), out_of_order, incomplete, duplicates, early)


def produce(bootstrap: str, topic: str, records: list[LineageRecord]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for i, rec in enumerate(records):
        while True:
            try:
                if rec.headers:
                    producer.produce(topic, rec.value, rec.key, headers=list(rec.headers))
                else:
                    producer.produce(topic, rec.value, rec.key)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} records not acknowledged"


def identity(value: bytes) -> tuple[str, str, str]:
    """(job key, runId, eventType) of an event body, to check order and completeness."""
    doc = json.loads(value)
    return f"{doc['job']['namespace']}/{doc['job']['name']}", doc["run"]["runId"], doc["eventType"]


def worker_events(tmp: Path, runs: int, seed: int, running_events: bool) -> list[LineageRecord]:
    """The worker's own events for a simulated log of `runs` runs, in log order per log partition:
    the pure step (`processor.apply`, parents from the same log partition) over every record, with
    RUNNING events on or off, keyed and with headers as the worker sends them."""
    from olstream.contract import codec
    from olstream.shared.errors import DecodeError
    from olstream.streams.mapping import MappingConfig
    from olstream.streams.state import StreamInputError
    from tests.support.stream_records import Harness
    from tests.support.stream_support import simulated_rows

    rows, _ = simulated_rows(tmp, runs, seed)
    harness = Harness(MappingConfig(running_events=running_events))
    out: list[LineageRecord] = []
    for row in rows:
        try:
            outputs = harness.feed(codec.decode(row.payload, row.partition, row.offset))
        except (DecodeError, StreamInputError):  # a record the worker refuses: to its errors topic
            continue
        out += [LineageRecord(o.key, o.value, ((HEADER_RUN_ID, o.run_id.encode("ascii")),)) for o in outputs]
    return out
