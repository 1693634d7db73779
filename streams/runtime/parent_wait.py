"""Step 2: a child run waits until the run directory can resolve its parent.

A RunStarted that carries the log's heads (the source puts them on every one) is decoded here and
its directory lookup built (`Taken.record`, `Taken.lookup`), so the record is decoded once. A child
whose parent the directory cannot judge yet (`run_directory.NotCovered`: the directory has not read
the records topic up to the child's heads) waits, before the gate's lock: checkpoints and
rebalances go on meanwhile, and the directory's progress depends on the records topic only
(`DirectoryReader`). Every child's wait is observed, a zero one too: the START delay the directory
adds.
"""

from __future__ import annotations

import time

from olstream.contract import codec, wire
from olstream.contract.records import RunStarted
from olstream.shared.errors import DecodeError
from olstream.streams import state as st
from olstream.streams.mapping import MappingConfig
from olstream.streams.processor import parent_resolver
from olstream.streams.run_directory import DirectoryLookup, Heads, NotCovered, RunDirectory
from olstream.streams.runid import epoch_millis
from olstream.streams.runtime.chain import Link, Step, Taken
from olstream.streams.runtime.directory_reader import DirectoryReader
from olstream.streams.runtime.input_order import InputOrder
from olstream.streams.runtime.metrics import CHILDREN_WAITING, PARENT_WAIT_RECORD_SECONDS, PARENT_WAIT_SECONDS
from olstream.streams.runtime.transaction_errors import Fenced
from olstream.streams.state import StreamInputError


class ParentWait(Link):
    """Decodes a RunStarted with heads, builds its directory lookup, and holds a child until the
    directory covers what its lineage needs."""

    def __init__(
        self,
        cfg: MappingConfig,
        max_event_bytes: int,
        directory: RunDirectory,
        reader: DirectoryReader,
        order: InputOrder,
        next_step: Step[Taken],
    ) -> None:
        self.cfg = cfg
        self.directory = directory
        self.reader = reader
        self.order = order
        self.resolve_parent = parent_resolver(cfg, max_event_bytes)
        self.next = next_step

    async def submit(self, item: Taken) -> Fenced | None:
        event = item.input.event
        raw = wire.header_value(event.message.headers, wire.HEADER_HEADS) if event.value else None
        if raw is not None:
            try:  # decoded again by `ApplyRecord`, naming its positions, only when this fails
                record = codec.decode(event.value)
            except DecodeError:
                record = None
            heads = wire.decode_heads(raw)
            if isinstance(record, RunStarted) and heads is not None:
                item.record = record
                item.lookup = lookup = DirectoryLookup(
                    self.directory,
                    self.resolve_parent,
                    record.partition,
                    record.offset,
                    heads,
                    epoch_millis(record.append_time),
                )
                if record.parent is not None:
                    await self.wait(record, lookup, event.message.timestamp)
        return await self.next.submit(item)

    async def wait(self, record: RunStarted, lookup: DirectoryLookup, timestamp: object) -> None:
        started = time.monotonic()
        need = self.pending(record, lookup)
        if need is not None:
            CHILDREN_WAITING.inc()
            self.order.wait_started()  # the records behind it are held, not dropped
            try:
                while need is not None:
                    await self.reader.wait_covered(need)
                    need = self.pending(record, lookup)
            finally:
                CHILDREN_WAITING.dec()
                self.order.wait_ended()
            if isinstance(timestamp, (int, float)) and timestamp > 0:
                behind = (self.reader.newest_ms - timestamp * 1000) / 1000
                PARENT_WAIT_RECORD_SECONDS.observe(max(0.0, behind))
        PARENT_WAIT_SECONDS.observe(time.monotonic() - started)

    def pending(self, record: RunStarted, lookup: DirectoryLookup) -> Heads | None:
        """The heads the directory must reach before this child can be applied; None when it can be.

        Its lineage is resolved here as `state.start` resolves it when the record is applied, so a
        parent that itself waits makes the child wait for the parent's heads too.
        """
        try:  # the lookup raises NotCovered only when the child needs the directory at all
            st.resolve_lineage(
                st.normalized_start(record), self.cfg.job_prefix, lookup, self.cfg.hierarchical
            )
        except NotCovered as e:
            return e.heads
        except StreamInputError:
            return None  # refused when applied
        return None
