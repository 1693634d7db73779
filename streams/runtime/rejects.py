"""The worker's error records: a record that cannot be applied goes to the errors topic, bounded.

The value is the input record, or
for `too_large` the event that was too large; a value above `deadletter.COPY_LIMIT` is cut to its
first bytes, with its size and digest in headers (`deadletter.bounded_copy`).
"""

from __future__ import annotations

import logging
from typing import Any

from olstream.contract import wire
from olstream.contract.records import DatasetDeclared, Record
from olstream.shared import deadletter
from olstream.streams import sizes
from olstream.streams.log_marks import int_value
from olstream.streams.processor import Step
from olstream.streams.runtime.metrics import ERRORS
from olstream.streams.runtime.sender import EventSends
from olstream.streams.settings import WorkerSettings

log = logging.getLogger(__name__)


def int_header(headers: Any, name: str) -> int | None:
    return int_value(wire.header_value(headers, name))


class ErrorRecords:
    """Sends the records that cannot be applied to the errors topic, with the reason in headers."""

    def __init__(self, settings: WorkerSettings, sender: EventSends) -> None:
        self.settings = settings
        self.sender = sender

    def too_large(self, event: Any, record: Record, step: Step) -> bool:
        """Refuse a record whose event, or whose run's state, would exceed --max-event-bytes."""
        limit = self.settings.max_event_bytes
        for out in step.outputs:
            if len(out.value) > limit:
                self.reject(
                    event,
                    deadletter.TOO_LARGE,
                    f"record at log partition {record.partition}, offset {record.offset}: its "
                    f"{out.event_type} event is {len(out.value)} bytes, above --max-event-bytes {limit} "
                    "(the record is not applied; the value is the event's first bytes)",
                    out.value,
                )
                return True
        if step.write is not None and isinstance(record, DatasetDeclared):
            size = sizes.terminal_event_bound(step.write, limit)
            if size is not None:
                self.reject(
                    event,
                    deadletter.TOO_LARGE,
                    f"record at log partition {record.partition}, offset {record.offset}: with this "
                    f"dataset the run's events and state would be about {size} bytes, above "
                    f"--max-event-bytes {limit} (the dataset is not added to the run)",
                )
                return True
        return False

    def reject(self, event: Any, reason: str, detail: str, payload: bytes | None = None) -> None:
        """Send the record (or `payload`: its too-large event) to the errors topic, bounded in size."""
        msg = event.message
        ERRORS.labels(reason).inc()
        log.warning("bad input at topic partition %d, offset %d: %s", msg.partition, msg.offset, detail)
        value, whole = deadletter.bounded_copy(
            event.value if payload is None else payload, always=reason == deadletter.TOO_LARGE
        )
        headers: list[tuple[str, str | bytes | None]] = [
            (deadletter.ERROR, reason.encode()),
            (deadletter.ERROR_DETAIL, detail.encode("utf-8")),
            *deadletter.origin_headers(msg.topic, msg.partition, msg.offset),
            *whole,
        ]
        for name in (*wire.RECORD_HEADERS, *deadletter.REDRIVE_HEADERS):  # a re-driven record's count goes on
            raw = wire.header_value(msg.headers, name)
            if raw is not None:
                headers.append((name, raw))
        self.sender.send(self.settings.errors_topic, msg.key, value, headers)
