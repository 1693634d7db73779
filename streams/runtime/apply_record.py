"""Step 5: apply the record to its run's state: decode, evict, the pure step, state into the
partition's transaction; bad input to the errors topic.

- decode: an undecodable record goes to the errors topic (the parent wait decoded a RunStarted with
  heads already);
- evict: finished runs of the record's log partition past the retention window are deleted;
- apply: the pure step (``olstream.streams.processor.apply``) over the run state the partition's
  transaction holds, its state change written into that transaction; a record it refuses, or one
  whose event or state would be too large, goes to the errors topic.

Its RunEvents (`Taken.outputs`, rendered by the pure step) go on to the send step. Nothing here
waits.
"""

from __future__ import annotations

import logging

from olstream.contract import codec, wire
from olstream.contract.naming import MAX_JOB_PATH_BYTES
from olstream.contract.records import Record, RunEnded, RunStarted
from olstream.shared.errors import DecodeError
from olstream.streams import processor
from olstream.streams.mapping import MappingConfig
from olstream.streams.processor import apply
from olstream.streams.run_directory import DirectoryLookup, NotCovered
from olstream.streams.runid import epoch_millis
from olstream.streams.runtime.chain import Link, Step, Taken
from olstream.streams.runtime.metrics import (
    EVICTED,
    JOB_PATH_TOO_LONG,
    PARENT_NOT_VISIBLE,
    PARENT_OUTCOMES,
    REPLAYS,
    record_counter,
)
from olstream.streams.runtime.rejects import ErrorRecords
from olstream.streams.runtime.run_table import RunTable
from olstream.streams.runtime.transaction_errors import Fenced
from olstream.streams.state import StreamInputError

log = logging.getLogger(__name__)


class ApplyRecord(Link):
    """Applies one input record to its partition's state transaction."""

    def __init__(
        self, cfg: MappingConfig, table: RunTable, errors: ErrorRecords, next_step: Step[Taken]
    ) -> None:
        self.cfg = cfg
        self.table = table
        self.errors = errors
        self.next = next_step
        self.parent_warned = False
        self.path_warned = False

    async def submit(self, item: Taken) -> Fenced | None:
        if not item.done:
            try:
                item.done = not self.change_state(item)
            except Fenced as e:  # an error record found the transaction fenced: the gate drops the batch
                return e
        return await self.next.submit(item)

    def change_state(self, item: Taken) -> bool:
        """Apply the record; False when there was nothing to apply or it was refused (it is done)."""
        event, record = item.input.event, item.record
        if record is None:  # not decoded by the parent wait
            if (
                not event.value
                and wire.header_value(event.message.headers, wire.HEADER_TYPE) == wire.ROW_REJECTED
            ):
                return False  # the source's marker of a row it sent to its errors topic
            try:
                record = item.record = codec.decode(
                    event.value, item.input.log_partition, item.input.log_offset
                )
            except DecodeError as e:  # undecodable, or invalid_time (naming the field)
                self.errors.reject(event, e.error_reason, str(e))
                return False
        record_counter(type(record).__name__).inc()
        tx = item.state
        assert tx is not None, "the gate opens the partition's state"
        committed = self.table.committed_log.committed(record.partition)
        evicted = tx.evict(
            self.table.retention, record.partition, epoch_millis(record.append_time), committed
        )
        if evicted:
            EVICTED.inc(evicted)
        parents = item.lookup if isinstance(record, RunStarted) else None
        try:
            step = apply(
                record, self.cfg, tx.get, item.input.partition, parents, redriven=item.input.redriven
            )
        except StreamInputError as e:
            self.errors.reject(event, e.reason, str(e))
            return False
        except NotCovered as e:  # the parent wait waited for the directory before the gate
            raise RuntimeError(
                f"record at log partition {record.partition}, offset {record.offset}: the run directory "
                f"is behind its heads {e.heads} after the wait"
            ) from e
        if self.errors.too_large(event, record, step):
            return False
        if step.write is not None:
            tx.set(step.key, step.write)
            if isinstance(record, RunEnded) and step.write.end is not None:
                self.table.retention.note_finished(
                    record.partition, step.write.end.end_ms, record.offset, step.key
                )
        if step.replay or step.parent_not_visible or step.job_path_too_long or parents is not None:
            self.note(record, step, parents)
        item.outputs = step.outputs
        return True

    def note(self, record: Record, step: processor.Step, parents: DirectoryLookup | None) -> None:
        """Count a replay, a parent's outcome; warn (once) of a parent not visible, a path too long."""
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
