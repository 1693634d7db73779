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
from dataclasses import dataclass
from typing import Any

from olstream.contract import codec, wire
from olstream.contract.naming import MAX_JOB_PATH_BYTES
from olstream.contract.records import Record, RunEnded, RunStarted
from olstream.shared import deadletter
from olstream.shared.errors import DecodeError
from olstream.streams import state as st
from olstream.streams.log_marks import Verdict
from olstream.streams.processor import apply, parent_resolver
from olstream.streams.run_directory import DirectoryLookup, Heads, NotCovered, RunDirectory
from olstream.streams.runid import epoch_millis
from olstream.streams.runtime.metrics import (
    JOB_PATH_TOO_LONG,
    PARENT_NOT_VISIBLE,
    PARENT_OUTCOMES,
    REDRIVEN,
    REPLAYS,
    event_counter,
    record_counter,
)
from olstream.streams.runtime.rejects import ErrorRecords, int_value
from olstream.streams.runtime.run_table import RunTable
from olstream.streams.runtime.sender import EventSends, Headers
from olstream.streams.settings import WorkerSettings
from olstream.streams.state import StreamInputError

log = logging.getLogger(__name__)


def position_headers(headers: Any) -> tuple[int | None, int | None, bool]:
    """In one pass over a record's headers: its log partition and offset (`rejects.int_header` of
    `wire.HEADER_PARTITION` and `wire.HEADER_OFFSET`), and whether it carries
    `deadletter.REDRIVE_ATTEMPT` (an error record sent again). The first value of a name counts, as
    `wire.header_value` reads it."""
    partition = offset = None
    redriven = False
    for key, value in headers.items() if isinstance(headers, dict) else (headers or ()):
        if not isinstance(value, bytes):
            continue
        if key == wire.HEADER_PARTITION:
            if partition is None:
                partition = value
        elif key == wire.HEADER_OFFSET:
            if offset is None:
                offset = value
        elif key == deadletter.REDRIVE_ATTEMPT:
            redriven = True
    return int_value(partition), int_value(offset), redriven


@dataclass(frozen=True, slots=True)
class WaitedChild:
    """A child RunStarted with the log's heads, decoded and its directory lookup built before the wait."""

    record: RunStarted
    lookup: DirectoryLookup


class RecordStep:
    """Applies one input record: its state change into the batch's overlay, its events to the producer."""

    def __init__(
        self,
        settings: WorkerSettings,
        table: RunTable,
        errors: ErrorRecords,
        sender: EventSends,
        directory: RunDirectory,
    ) -> None:
        self.settings = settings
        self.cfg = settings.mapping
        self.table = table
        self.errors = errors
        self.sender = sender
        self.directory = directory
        self.resolve_parent = parent_resolver(settings.mapping, settings.max_event_bytes)
        self.parent_warned = False
        self.path_warned = False

    def handle(self, event: Any, log_offsets: dict[int, int], child: WaitedChild | None = None) -> None:
        """Process one record, unless its log partition's mark says it was applied before; `log_offsets`
        (log partition -> the highest log offset of the batch's records of this input partition) is
        updated. `child` is what the wait for its parents decoded already (`waited_child`)."""
        msg = event.message
        log_partition, log_offset, redriven = position_headers(msg.headers)
        if log_partition is None or log_offset is None:  # no position in its headers: no mark to judge by
            self.handle_record(event, log_partition, log_offset, log_offsets, child)
            return
        if redriven:
            # an error record sent again by `olstream errors redrive`: the mark covers its position
            # (it was refused), so it passes the mark, is processed as new, and moves no mark
            REDRIVEN.inc()
            self.handle_record(event, log_partition, log_offset, log_offsets, child, redriven=True)
            return
        if self.table.judge_mark(msg.partition, log_partition, log_offset) is Verdict.DUPLICATE:
            return
        self.handle_record(event, log_partition, log_offset, log_offsets, child)
        # applied, a replay, or refused to the errors topic: it has had its effect
        self.table.marks.applied(msg.partition, log_partition, log_offset, event)

    def handle_record(
        self,
        event: Any,
        log_partition: int | None,
        log_offset: int | None,
        log_offsets: dict[int, int],
        child: WaitedChild | None,
        redriven: bool = False,
    ) -> None:
        msg = event.message
        record: Record
        parents: DirectoryLookup | None
        if child is not None:  # decoded, and its lookup built, by the wait for its parents
            record, parents = child.record, child.lookup
        else:
            if not event.value and wire.header_value(msg.headers, wire.HEADER_TYPE) == wire.ROW_REJECTED:
                return  # the source's marker of a row it sent to its errors topic: nothing to apply
            try:
                record = codec.decode(event.value, log_partition, log_offset)
            except DecodeError as e:  # undecodable, or invalid_time (naming the field)
                self.errors.reject(event, e.error_reason, str(e))
                return
            parents = self.parent_lookup(record, msg.headers) if isinstance(record, RunStarted) else None
        record_counter(type(record).__name__).inc()
        if record.offset > log_offsets.get(record.partition, -1):
            log_offsets[record.partition] = record.offset
        self.table.evict(record.partition, epoch_millis(record.append_time), event)
        try:
            step = apply(record, self.cfg, self.table.lookup, msg.partition, parents, redriven=redriven)
        except StreamInputError as e:
            self.errors.reject(event, e.reason, str(e))
            return
        except NotCovered as e:  # the agent waited for the directory before it took the record
            raise RuntimeError(
                f"record at log partition {record.partition}, offset {record.offset}: the run directory "
                f"is behind its heads {e.heads} after the wait"
            ) from e
        if self.errors.too_large(event, record, step):
            return
        if step.write is not None:
            self.table.put(step.key, step.write, event)
            if isinstance(record, RunEnded) and step.write.end is not None:
                self.table.retention.note_finished(
                    record.partition, step.write.end.end_ms, record.offset, step.key
                )
        if step.replay:
            REPLAYS.inc()
        if parents is not None and isinstance(record, RunStarted) and record.parent is not None:
            outcome = parents.outcomes.get(record.parent.engine_run_id)
            if outcome is not None:
                PARENT_OUTCOMES.labels(outcome.value).inc()
        if step.parent_not_visible:
            self.note_parent_not_visible(record)
        if step.job_path_too_long:
            self.note_job_path_too_long(record)
        output_topic = self.settings.output_topic
        for out in step.outputs:
            headers: Headers = list(out.headers())
            self.sender.send(output_topic, out.key, out.value, headers)
            event_counter(out.event_type).inc()

    def parent_lookup(self, record: RunStarted, headers: Any) -> DirectoryLookup | None:
        """The directory's lookup for a starting run whose record carries the log's heads; None (its
        own log partition's state only) without them."""
        raw = wire.header_value(headers, wire.HEADER_HEADS)
        heads = None if raw is None else wire.decode_heads(raw)
        if heads is None:
            return None
        return DirectoryLookup(
            self.directory,
            self.resolve_parent,
            record.partition,
            record.offset,
            heads,
            epoch_millis(record.append_time),
        )

    def waited_child(self, event: Any) -> WaitedChild | None:
        """The record and its directory lookup, when it is a RunStarted with a parent and the source's
        heads (it may wait); `handle` takes them on, so the record is decoded once."""
        msg = event.message
        if not event.value or wire.header_value(msg.headers, wire.HEADER_HEADS) is None:
            return None
        try:  # decoded again by `handle`, naming its positions, only when this fails
            record = codec.decode(event.value)
        except DecodeError:
            return None
        if not isinstance(record, RunStarted) or record.parent is None:
            return None
        lookup = self.parent_lookup(record, msg.headers)
        return None if lookup is None else WaitedChild(record, lookup)

    def pending(self, child: WaitedChild) -> Heads | None:
        """The heads the directory must reach before this child can be applied; None when it can be.

        Its lineage is resolved here as `state.start` resolves it when the record is applied, so a
        parent that itself waits makes the child wait for the parent's heads too.
        """
        record, lookup = child.record, child.lookup
        try:  # the lookup raises NotCovered only when the child needs the directory at all
            st.resolve_lineage(
                st.normalized_start(record), self.cfg.job_prefix, lookup, self.cfg.hierarchical
            )
        except NotCovered as e:
            return e.heads
        except StreamInputError:
            return None  # refused when applied
        return None

    def note_parent_not_visible(self, record: Record) -> None:
        PARENT_NOT_VISIBLE.inc()
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
        JOB_PATH_TOO_LONG.inc()
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
