"""The log partitions' high-water marks (``streams/log_marks.py``): verdicts, holes, the batch's book."""

from __future__ import annotations

from olstream.streams.log_marks import (
    MARK_PREFIX,
    MAX_HOLES,
    LogMark,
    MarkBook,
    Verdict,
    advance,
    dumps_mark,
    is_mark_key,
    judge,
    loads_mark,
    mark_key,
)
from olstream.streams.state import state_key


def test_offsets_at_or_below_the_mark_are_duplicates_and_above_it_are_applied() -> None:
    assert judge(None, 5) is Verdict.FIRST
    mark = advance(None, 5)
    assert mark == LogMark(5)
    assert judge(mark, 6) is Verdict.NEXT
    assert judge(mark, 5) is Verdict.DUPLICATE
    assert judge(mark, 0) is Verdict.DUPLICATE
    assert advance(mark, 6) == LogMark(6)


def test_a_gap_leaves_a_hole_that_a_late_record_fills_once() -> None:
    mark = advance(LogMark(3), 8)  # 4..7 never arrived
    assert mark == LogMark(8, ((4, 7),))
    assert judge(mark, 9) is Verdict.NEXT
    assert judge(mark, 3) is Verdict.DUPLICATE
    assert [judge(mark, o) for o in (4, 5, 7)] == [Verdict.FILL] * 3
    mark = advance(mark, 5)  # arrived late: applied, and only once
    assert mark == LogMark(8, ((4, 4), (6, 7)))
    assert judge(mark, 5) is Verdict.DUPLICATE
    mark = advance(advance(advance(mark, 4), 7), 6)
    assert mark == LogMark(8)
    assert judge(advance(mark, 12), 11) is Verdict.FILL


def test_only_the_highest_holes_are_kept() -> None:
    mark = LogMark(0)
    for _ in range(MAX_HOLES + 3):
        mark = advance(mark, mark.high + 2)  # one missing offset each time
    assert len(mark.holes) == MAX_HOLES
    assert judge(mark, 1) is Verdict.DUPLICATE  # the oldest holes were dropped
    assert judge(mark, mark.high - 1) is Verdict.FILL


def test_a_mark_round_trips_and_its_key_is_never_a_runs_key() -> None:
    for mark in (LogMark(0), LogMark(10**12, ((1, 2), (4, 9)))):
        assert loads_mark(dumps_mark(mark)) == mark
    key = mark_key(3, 17)
    assert key == f"{MARK_PREFIX}3:17" and is_mark_key(key.encode())
    # a run's key starts with its log partition's number, whatever its engine run id
    for log_partition in (0, 17, -1):
        for rid in ("hwm:3:17", "", "x"):
            assert not is_mark_key(state_key(log_partition, rid).encode())
            assert state_key(log_partition, rid) != key


def test_the_book_judges_against_the_batch_then_the_store() -> None:
    reads: list[str] = []
    store = {mark_key(0, 2): LogMark(10)}

    def read(key: str) -> LogMark | None:
        reads.append(key)
        return store.get(key)

    book: MarkBook[str] = MarkBook()
    assert book.judge(0, 2, 10, read) is Verdict.DUPLICATE
    assert book.current(0, 2) == LogMark(10) and book.batch == {}
    assert book.judge(0, 2, 11, read) is Verdict.NEXT
    book.applied(0, 2, 11, "e1")
    assert book.judge(0, 2, 11, read) is Verdict.DUPLICATE  # later in the same batch
    assert book.judge(0, 2, 12, read) is Verdict.NEXT
    book.applied(0, 2, 12, "e2")
    assert book.judge(0, 2, 15, read) is Verdict.GAP
    book.applied(0, 2, 15, "e3")
    assert book.current(0, 2) == LogMark(15, ((13, 14),))
    assert book.judge(0, 2, 14, read) is Verdict.FILL
    book.applied(0, 2, 14, "e4")
    assert book.judge(0, 2, 14, read) is Verdict.DUPLICATE
    assert reads == [mark_key(0, 2)]  # read once, then remembered
    assert book.judge(1, 2, 0, read) is Verdict.FIRST  # another input partition: its own mark
    assert reads == [mark_key(0, 2), mark_key(1, 2)]

    taken = book.take_batch()
    assert taken == [(0, 2, LogMark(15, ((13, 13),)), "e4")] and book.batch == {}
    # not written (a crash, or the partition revoked): the stored mark is still the old one
    assert book.judge(0, 2, 11, read) is Verdict.NEXT
    book.written(0, 2, LogMark(15, ((13, 13),)))
    assert book.judge(0, 2, 11, read) is Verdict.DUPLICATE
    assert book.judge(0, 2, 13, read) is Verdict.FILL
    book.clear()
    assert book.judge(0, 2, 11, read) is Verdict.NEXT  # read again: the store still says 10
    assert len(reads) == 3
