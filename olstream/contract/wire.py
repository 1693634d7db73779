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
HEADER_HEADS = "olstream.heads"
"""On a RunStarted: the event log's head offset of every log partition when the source read it, as
``partition:offset`` pairs joined by commas (`encode_heads`). Every run appended before this one is at
or below these heads, so a worker that has read every log partition up to them knows whether the
run's parent is in the log (`olstream.streams.run_directory`)."""
ROW_REJECTED = b"RowRejected"
"""`HEADER_TYPE` of a position marker: the source sent the row at this position to its errors topic,
and puts this empty message in its place so that readers of the records topic see every position
of a log partition (a worker skips it)."""
RECORD_HEADERS = (HEADER_PARTITION, HEADER_OFFSET, HEADER_TYPE, HEADER_FINGERPRINT, HEADER_HEADS)
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


def encode_heads(heads: dict[int, int]) -> bytes:
    """`HEADER_HEADS` of a log's heads (partition -> offset of its last row; empty partitions left out)."""
    return ",".join(f"{p}:{o}" for p, o in sorted(heads.items()) if o >= 0).encode("ascii")


def decode_heads(raw: bytes) -> dict[int, int] | None:
    """The heads `encode_heads` wrote; None when the value is not of that form."""
    out: dict[int, int] = {}
    if not raw:
        return out
    try:
        for pair in raw.decode("ascii").split(","):
            partition, _, offset = pair.partition(":")
            p, o = int(partition), int(offset)
            if p < 0 or o < 0 or p in out:
                return None
            out[p] = o
    except ValueError:
        return None
    return out


def header_value(headers: Any, name: str) -> bytes | None:
    """The value of header `name` in a Kafka client's headers (a list of pairs, or a dict); None if absent.

    Serves confluent-kafka's `Message.headers()` and faust's `message.headers` alike.
    """
    items = headers.items() if isinstance(headers, dict) else (headers or ())
    for key, value in items:
        if key == name and isinstance(value, bytes):
            return value
    return None
