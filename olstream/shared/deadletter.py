"""The one vocabulary of dead-letter headers: the source's errors topic, the worker's errors
topic and the sink's DLQ all say why and from where with these names.

- `olstream.error` (source, worker, sink): why. The source's decode reason; the worker's reason
  code (`invalid_namespace`, `declaration_after_end`, ...); the sink's `rejected`.
- `olstream.error.detail` (worker): what exactly was wrong, naming the field.
- `olstream.source.topic`, `.partition`, `.offset` (worker, sink): the Kafka message that failed.
- `olstream.status` (sink): the receiver's HTTP status (empty: no response).
- `olstream.response` (sink): the first 1,024 bytes of the receiver's answer.
- `olstream.error.size` and `olstream.error.sha256` (source, worker): the size and digest of a
  payload whose copy was cut to its first `COPY_LIMIT` bytes (`bounded_copy`): a row or an event
  that was `too_large`, or any failed message above the limit.

- `olstream.redrive.attempt` (any re-driven message): how many times `olstream errors redrive` has
  sent it through again (1 the first time). The worker and the sink copy it to their error topic
  when the message fails again, so the next redrive counts on and stops at `--max-attempts`.
- `olstream.redriven.from` (any re-driven message): the error record it was sent again from
  (`topic[partition]@offset`).

The records headers of the contract (`olstream.contract.wire`: partition, offset, type, fingerprint) are
copied along when the failed message had them, so a record is always named by its place in
the event log.
"""

from __future__ import annotations

import hashlib

ERROR = "olstream.error"
ERROR_DETAIL = "olstream.error.detail"
SOURCE_TOPIC = "olstream.source.topic"
SOURCE_PARTITION = "olstream.source.partition"
SOURCE_OFFSET = "olstream.source.offset"
HTTP_STATUS = "olstream.status"
HTTP_RESPONSE = "olstream.response"
RESPONSE_LIMIT = 1024
"""Bytes of a receiver's answer kept in `olstream.response`."""
RETRIES_EXHAUSTED = "retries_exhausted"
"""`olstream.error` of an event the receiver kept failing (5xx, timeouts) for `--retry-timeout`
while it accepted others: `olstream.status` and `olstream.response` hold the last answer."""
REJECTED = "rejected"
"""`olstream.error` of an event the receiver refused (400, 413 or 422: `connectors/sink/delivery.py`)."""

TOO_LARGE = "too_large"
"""`olstream.error` of a row (source) or an event (worker) above its size limit."""
SIZE = "olstream.error.size"
DIGEST = "olstream.error.sha256"
COPY_LIMIT = 65_536
"""Bytes of a failed payload copied to an errors topic or DLQ; a larger one is cut (`bounded_copy`)."""

REDRIVE_ATTEMPT = "olstream.redrive.attempt"
REDRIVEN_FROM = "olstream.redriven.from"
REDRIVE_HEADERS = (REDRIVE_ATTEMPT, REDRIVEN_FROM)

Headers = list[tuple[str, str | bytes | None]]


def bounded_copy(payload: bytes, *, always: bool = False) -> tuple[bytes, Headers]:
    """The copy of a failed payload to publish, and headers naming the whole: its size and SHA-256.

    A payload up to `COPY_LIMIT` bytes is copied whole (with no headers unless `always`); a larger
    one is cut to its first `COPY_LIMIT` bytes, so an error record always fits its topic.
    """
    if len(payload) <= COPY_LIMIT and not always:
        return payload, []
    return payload[:COPY_LIMIT], [
        (SIZE, str(len(payload)).encode()),
        (DIGEST, hashlib.sha256(payload).hexdigest().encode()),
    ]


def origin_headers(topic: str, partition: int, offset: int) -> Headers:
    """Where the failed Kafka message was."""
    return [
        (SOURCE_TOPIC, topic.encode()),
        (SOURCE_PARTITION, str(partition).encode()),
        (SOURCE_OFFSET, str(offset).encode()),
    ]


def redrive_attempt(raw: bytes | str | None) -> int:
    """The attempt count of `olstream.redrive.attempt` (0: never re-driven, or unreadable)."""
    if raw is None:
        return 0
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    return int(text) if text.isdigit() else 0
