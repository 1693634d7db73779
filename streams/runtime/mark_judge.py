"""Step 4: judge a record by its log partition's mark; a record applied before is passed over.

Each (input partition, log partition) has a mark: the highest log offset applied, with its holes
(``olstream.streams.log_marks``). A record at or below it, in no hole, was applied before (a record
read again after a restart, or republished) and goes on `done`: the checkpoint counts its offset,
nothing else sees it. Any other record moves the mark past it here: it is applied, a replay, or
refused to the errors topic by the steps that follow, and in each case has had its effect. An
error record sent again by `olstream errors redrive` passes the mark and moves none. A record
without a log position in its headers has no mark to be judged by.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter

from olstream.streams.log_marks import Verdict
from olstream.streams.runtime.chain import Link, Step, Taken
from olstream.streams.runtime.metrics import REDRIVEN
from olstream.streams.runtime.transaction_errors import Fenced

log = logging.getLogger(__name__)

DUPLICATES = Counter(
    "olstream_stream_duplicates_total",
    "Input records at or below their log partition's high-water mark (applied before): skipped",
)
GAPS = Counter(
    "olstream_stream_log_gaps_total",
    "Input records past the next offset of their log partition (the offsets between never arrived)",
)


class JudgeMarks(Link):
    """Passes over a record its log partition's mark covers; moves the mark past any other."""

    def __init__(self, next_step: Step[Taken]) -> None:
        self.next = next_step
        self.duplicates_logged = False

    async def submit(self, item: Taken) -> Fenced | None:
        record = item.input
        log_partition, log_offset = record.log_partition, record.log_offset
        if log_partition is not None and log_offset is not None:
            if record.redriven:
                REDRIVEN.inc()
            else:
                state = item.state
                assert state is not None, "the gate opens the partition's state"
                verdict = state.judge(log_partition, log_offset)
                if verdict is Verdict.DUPLICATE:
                    self.note_duplicate(item, log_partition, log_offset)
                    item.done = True
                else:
                    if verdict is Verdict.GAP:
                        self.note_gap(item, log_partition, log_offset)
                    state.applied(log_partition, log_offset)
        return await self.next.submit(item)

    def note_duplicate(self, item: Taken, log_partition: int, offset: int) -> None:
        DUPLICATES.inc()
        if not self.duplicates_logged:
            self.duplicates_logged = True
            assert item.state is not None
            mark = item.state.marks.current(item.input.partition, log_partition)
            # info: records read again behind the stored state after every restart are duplicates too
            log.info(
                "input partition %d: the record of log partition %d, offset %d was applied before "
                "(the partition's mark is at offset %d): skipped, as every such repeat is "
                "(duplicates_total counts them; logged once per worker)",
                item.input.partition,
                log_partition,
                offset,
                mark.high if mark is not None else -1,
            )

    def note_gap(self, item: Taken, log_partition: int, offset: int) -> None:
        GAPS.inc()
        assert item.state is not None
        mark = item.state.marks.current(item.input.partition, log_partition)
        assert mark is not None
        log.warning(
            "input partition %d: log partition %d goes on at offset %d; offsets %d..%d never arrived "
            "(applied as usual; nothing is guessed for the missing ones, which are applied if they come "
            "later)",
            item.input.partition,
            log_partition,
            offset,
            mark.high + 1,
            offset - 1,
        )
