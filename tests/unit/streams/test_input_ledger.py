"""The input ledger: records are taken in offset order; commits pass only acked or empty offsets."""

from __future__ import annotations

from olstream.streams.input_ledger import Admission, InputLedger


def test_records_in_order_are_taken_and_their_acks_advance_the_commit() -> None:
    ledger = InputLedger(10)
    assert [ledger.admit(o) for o in range(10, 15)] == [Admission.PROCESS] * 5
    for offset in range(10, 15):
        ledger.note_acked(offset)
    assert ledger.advance() == 15
    assert ledger.acked == set()


def test_a_record_already_taken_is_skipped() -> None:
    ledger = InputLedger(10)
    assert ledger.admit(10) is Admission.PROCESS
    assert ledger.admit(10) is Admission.SKIP  # fetched again after a seek
    assert ledger.admit(3) is Admission.SKIP  # below the committed offset


def test_a_record_past_the_read_position_is_a_hole() -> None:
    ledger = InputLedger(10)
    assert ledger.admit(10) is Admission.PROCESS
    assert ledger.admit(40) is Admission.HOLE  # 11..39 never reached the agent
    assert ledger.next_offset == 11


def test_an_empty_hole_is_passed_and_committed_over() -> None:
    ledger = InputLedger(10)
    assert ledger.admit(10) is Admission.PROCESS
    assert ledger.admit(12) is Admission.HOLE  # 11 is a transaction marker
    ledger.pass_absent(12)
    assert ledger.admit(12) is Admission.PROCESS
    ledger.note_acked(10)
    assert ledger.advance() == 12  # over the marker at 11; 12 is not acked yet
    ledger.note_acked(12)
    assert ledger.advance() == 13
    assert ledger.absent_until == {}


def test_a_hole_with_records_waits_for_them_to_be_read_again() -> None:
    ledger = InputLedger(10)
    assert ledger.admit(20) is Admission.HOLE
    assert ledger.request_reread(5.0) == 10
    assert ledger.admit(21) is Admission.SKIP  # still in flight from before the seek
    assert ledger.admit(20) is Admission.SKIP
    assert ledger.admit(10) is Admission.PROCESS  # the first record read again
    assert ledger.reread_since is None
    assert ledger.admit(11) is Admission.PROCESS


def test_acks_never_commit_over_an_offset_neither_acked_nor_empty() -> None:
    ledger = InputLedger(10)
    ledger.note_acked(10)
    for offset in range(12, 900):
        ledger.note_acked(offset)
    assert ledger.advance() == 11
    ledger.note_absent(20, 25)  # elsewhere: no help
    assert ledger.advance() == 11
    ledger.note_acked(11)
    assert ledger.advance() == 900


def test_acks_below_the_base_are_ignored() -> None:
    ledger = InputLedger(100)
    ledger.note_acked(5)  # from before the partition was sought to its committed offset
    assert ledger.acked == set()
    assert ledger.advance() == 100
