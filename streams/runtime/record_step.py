"""One input record's way through the worker, once the input order took it: judge, decode, apply,
send.

- judge: a record at or below its log partition's mark was applied before and is skipped
  (``olstream.streams.log_marks``);
- decode: an undecodable record goes to the errors topic;
- apply: the pure step (``olstream.streams.processor.apply``) over the run state the table holds,
  its state change kept in the batch's overlay (``RunTable.put``); a record it refuses, or one whose
  event or state would be too large, goes to the errors topic;
- send: the step's RunEvents (rendered by ``olstream.streams.mapping``) go to the output topic.

Nothing here waits: sends are acknowledged, and the state stored, by the batch's checkpoint.
"""

from __future__ import annotations

import logging
from typing import Any

from olstream.contract import codec, wire
from olstream.contract.naming import MAX_JOB_PATH_BYTES
from olstream.contract.records import Record, RunEnded
from olstream.shared.errors import DecodeError
from olstream.streams.log_marks import Verdict
from olstream.streams.processor import apply
from olstream.streams.runid import epoch_millis
from olstream.streams.runtime import app as m
from olstream.streams.runtime.rejects import ErrorRecords, int_header
from olstream.streams.runtime.run_table import RunTable
from olstream.streams.runtime.sender import Headers, Sender
from olstream.streams.settings import WorkerSettings
from olstream.streams.state import StreamInputError

log = logging.getLogger(__name__)


class RecordStep:
    """Applies one input record: its state change into the batch's overlay, its events to the producer."""

    def __init__(
        self, settings: WorkerSettings, table: RunTable, errors: ErrorRecords, sender: Sender
    ) -> None:
        self.settings = settings
        self.cfg = settings.mapping
        self.table = table
        self.errors = errors
        self.sender = sender
        self.parent_warned = False
        self.path_warned = False

    def handle(self, event: Any, log_offsets: dict[int, int]) -> None:
        """Process one record, unless its log partition's mark says it was applied before; `log_offsets`
        (log partition -> the highest log offset of the batch's records of this input partition) is
        updated."""
        msg = event.message
        headers = msg.headers
        log_partition = int_header(headers, wire.HEADER_PARTITION)
        log_offset = int_header(headers, wire.HEADER_OFFSET)
        if log_partition is None or log_offset is None:  # no position in its headers: no mark to judge by
            self.handle_record(event, log_partition, log_offset, log_offsets)
            return
        if self.table.judge_mark(msg.partition, log_partition, log_offset) is Verdict.DUPLICATE:
            return
        self.handle_record(event, log_partition, log_offset, log_offsets)
        # applied, a replay, or refused to the errors topic: it has had its effect
        self.table.marks.applied(msg.partition, log_partition, log_offset, event)

    def handle_record(
        self, event: Any, log_partition: int | None, log_offset: int | None, log_offsets: dict[int, int]
    ) -> None:
        msg = event.message
        try:
            record = codec.decode(event.value, log_partition, log_offset)
        except DecodeError as e:  # undecodable, or invalid_time (naming the field)
            self.errors.reject(event, e.error_reason, str(e))
            return
        m.record_counter(type(record).__name__).inc()
        if record.offset > log_offsets.get(record.partition, -1):
            log_offsets[record.partition] = record.offset
        self.table.evict(record.partition, epoch_millis(record.append_time), event)
        try:
            step = apply(record, self.cfg, self.table.lookup, msg.partition)
        except StreamInputError as e:
            self.errors.reject(event, e.reason, str(e))
            return
        if self.errors.too_large(event, record, step):
            return
        if step.write is not None:
            self.table.put(step.key, step.write, event)
            if isinstance(record, RunEnded) and step.write.end is not None:
                self.table.retention.note_finished(
                    record.partition, step.write.end.end_ms, record.offset, step.key
                )
        if step.replay:
            m.REPLAYS.inc()
        if step.parent_not_visible:
            self.note_parent_not_visible(record)
        if step.job_path_too_long:
            self.note_job_path_too_long(record)
        output_topic = self.settings.output_topic
        for out in step.outputs:
            headers: Headers = list(out.headers())
            self.sender.send(output_topic, out.key, out.value, headers)
            m.event_counter(out.event_type).inc()

    def note_parent_not_visible(self, record: Record) -> None:
        m.PARENT_NOT_VISIBLE.inc()
        if not self.parent_warned:
            self.parent_warned = True
            log.warning(
                "run %s (log partition %d, offset %d): its parent's identity or job path is neither on its "
                "record nor in this worker's state: emitted without a parent edge, named as a root "
                "(parent_not_visible_total counts them; logged once per worker)",
                record.engine_run_id,
                record.partition,
                record.offset,
            )

    def note_job_path_too_long(self, record: Record) -> None:
        m.JOB_PATH_TOO_LONG.inc()
        if not self.path_warned:
            self.path_warned = True
            log.warning(
                "run %s (log partition %d, offset %d): its job path would exceed %d bytes; named by a new "
                "path of its own, without a parent edge (job_path_too_long_total counts them; logged once "
                "per worker)",
                record.engine_run_id,
                record.partition,
                record.offset,
                MAX_JOB_PATH_BYTES,
            )
