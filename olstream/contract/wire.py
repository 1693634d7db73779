"""The Kafka keys and headers of olstream's messages.

Records topic (source -> worker). Key: the record's log partition in ASCII decimal, so one log
partition stays in one Kafka partition, in order. Headers (values ASCII): where the record is in
the event log, and which record and writer schema its Avro single-object body holds, so a consumer
can route or skip it without decoding.

Events topic (worker -> sink). `HEADER_RUN_ID`: the event's run, so the sink keeps each run's
events in order without parsing JSON (events without it are parsed). `HEADER_EVENT_TYPE`,
`HEADER_EVENT_TIME`, `HEADER_JOB_NAMESPACE`, `HEADER_JOB_NAME`: what the sink needs to keep each
job at its latest run's version, again without parsing JSON.
"""

from __future__ import annotations

from typing import Any

HEADER_PARTITION = "olstream.partition"
"""The record's log partition (decimal)."""
HEADER_OFFSET = "olstream.offset"
"""The record's offset in its log partition (decimal)."""
HEADER_TYPE = "olstream.type"
"""The record name: RunStarted, DatasetDeclared or RunEnded (absent when the row does not decode)."""
HEADER_FINGERPRINT = "olstream.fingerprint"
"""16 hex characters: the CRC-64-AVRO fingerprint of the body's writer schema."""
RECORD_HEADERS = (HEADER_PARTITION, HEADER_OFFSET, HEADER_TYPE, HEADER_FINGERPRINT)
HEADER_RUN_ID = "olstream.run_id"
"""On an event: its `run.runId` (ASCII)."""
HEADER_EVENT_TYPE = "olstream.event_type"
"""On an event: its `eventType` (ASCII: START, COMPLETE, FAIL, ABORT)."""
HEADER_EVENT_TIME = "olstream.event_time"
"""On an event: its `eventTime`, exactly as the event writes it (ASCII, RFC 3339)."""
HEADER_JOB_NAMESPACE = "olstream.job_namespace"
"""On an event: its `job.namespace` (UTF-8)."""
HEADER_JOB_NAME = "olstream.job_name"
"""On an event: its `job.name` (UTF-8)."""
EVENT_HEADERS = (HEADER_RUN_ID, HEADER_EVENT_TYPE, HEADER_EVENT_TIME, HEADER_JOB_NAMESPACE, HEADER_JOB_NAME)


def message_key(log_partition: int) -> bytes:
    """The Kafka key of a log partition's messages: its id in ASCII decimal."""
    return str(log_partition).encode("ascii")


def header_value(headers: Any, name: str) -> bytes | None:
    """The value of header `name` in a Kafka client's headers (a list of pairs, or a dict); None if absent.

    Serves confluent-kafka's `Message.headers()` and faust's `message.headers` alike.
    """
    items = headers.items() if isinstance(headers, dict) else (headers or ())
    for key, value in items:
        if key == name and isinstance(value, bytes):
            return value
    return None
