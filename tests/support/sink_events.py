"""RunEvents for sink tests and the sink benchmark, produced straight to a Kafka topic.

Events are variations of the spec's `tests/example_full_event.json`: each run gets its own
runId and a START, RUNNING..., COMPLETE/FAIL sequence with increasing eventTimes; events are
keyed `run:{namespace}/{job name}` the way the stream keys them.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.support.openlineage_schema import spec_dir

_SPEC = spec_dir()
EXAMPLE = (_SPEC or Path("/nonexistent")) / "tests" / "example_full_event.json"
BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class LineageRecord:
    key: bytes
    value: bytes


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


def produce(bootstrap: str, topic: str, records: list[LineageRecord]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for i, rec in enumerate(records):
        while True:
            try:
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
