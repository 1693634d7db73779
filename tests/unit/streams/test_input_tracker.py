"""The input tracker (``streams/input_tracker.py``): offset order, holes, tails, rereads, commits.

A pure state machine: each test feeds it facts in an order a worker meets them and checks its
decisions. The interleavings the runtime once needed guards for (a record arriving while the broker
is asked, a checkpoint or a rebalance in between, a slow checkpoint holding the queue back) are
here as orders of facts.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from olstream.streams.input_tracker import Admission, InputTracker, Probe, ReadAgain

QUIET = 5.0
REREAD = 10.0


def tracker(bases: dict[int, int] | None = None, now: float = 0.0) -> InputTracker:
    t = InputTracker(tail_quiet=QUIET, reread_after=REREAD, slow_checkpoint=1.0)
    t.assigned(bases if bases is not None else {0: 10}, now)
    return t


def take(t: InputTracker, partition: int, offsets: range | list[int], now: float = 0.0) -> list[Admission]:
    return [t.arrived(partition, o, now) for o in offsets]


def checkpoint(
    t: InputTracker, stored: dict[int, int], now: float = 0.0, waited: float = 0.0
) -> dict[int, int]:
    """A checkpoint as the runtime runs it: started, its records stored, the offsets to commit, committed."""
    t.checkpoint_started()
    for partition, through in stored.items():
        t.stored(partition, through)
    offsets = t.committable()
    t.did_commit(offsets)
    t.checkpoint_ended(now, waited)
    return offsets


# ---------------------------------------------------------------------------- offset order and commits


def test_records_in_order_are_processed_and_a_checkpoint_commits_them() -> None:
    t = tracker()
    assert take(t, 0, range(10, 15)) == [Admission.PROCESS] * 5
    assert t.committable() == {}  # processed, not stored: nothing to commit
    assert checkpoint(t, {0: 14}) == {0: 15}
    assert checkpoint(t, {}) == {}  # nothing moved: no commit


def test_a_record_taken_already_or_below_the_commit_is_skipped() -> None:
    t = tracker()
    assert take(t, 0, [10, 10, 3]) == [Admission.PROCESS, Admission.SKIP, Admission.SKIP]


def test_a_partition_not_assigned_is_skipped() -> None:
    assert tracker().arrived(7, 0, 0.0) is Admission.SKIP


def test_a_commit_covers_only_the_stored_prefix() -> None:
    t = tracker()
    take(t, 0, range(10, 20))
    assert checkpoint(t, {0: 14}) == {0: 15}  # 15..19 are in the next batch
    assert checkpoint(t, {0: 19}) == {0: 20}


def test_a_commit_never_goes_backwards() -> None:
    t = tracker()
    take(t, 0, range(10, 12))
    checkpoint(t, {0: 11})
    with pytest.raises(AssertionError, match="behind"):
        t.did_commit({0: 5})


def test_the_assignment_starts_every_partition_at_its_committed_offset() -> None:
    t = tracker({0: 10, 1: 0})
    take(t, 0, range(10, 13))
    t.revoked()
    assert t.rebalancing and t.arrived(0, 13, 0.0) is Admission.SKIP
    t.assigned({0: 12, 1: 0}, 1.0)  # another worker committed 10..11 only: 12 is processed again
    assert not t.rebalancing
    assert take(t, 0, [12, 13]) == [Admission.PROCESS] * 2
    assert checkpoint(t, {0: 13}) == {0: 14}


# ---------------------------------------------------------------------------- holes


def test_a_hole_with_records_is_read_again_from_the_first_of_them() -> None:
    t = tracker()
    take(t, 0, [10])
    assert t.arrived(0, 40, 0.0) is Admission.HOLE
    probe = t.probe_hole(0)
    assert probe.ticket.offset == 11
    decision = t.hole_probed(probe.ticket, 40, 11, 0.0)
    assert decision == ReadAgain(0, 11, "offset 40 arrived first")
    assert take(t, 0, [41, 40]) == [Admission.SKIP] * 2  # waiting for 11
    assert take(t, 0, range(11, 14)) == [Admission.PROCESS] * 3
    assert t.arrived(0, 40, 0.0) is Admission.HOLE  # the reread is over: past the read position again


def test_a_hole_of_transaction_markers_is_passed_and_the_record_processed() -> None:
    t = tracker()
    take(t, 0, [10])
    assert t.arrived(0, 12, 0.0) is Admission.HOLE  # 11 is a marker
    assert t.hole_probed(t.probe_hole(0).ticket, 12, 12, 0.0) is Admission.PROCESS
    assert checkpoint(t, {0: 12}) == {0: 13}


def test_markers_then_records_are_passed_up_to_the_first_record() -> None:
    t = tracker()
    take(t, 0, [10])
    t.arrived(0, 30, 0.0)
    decision = t.hole_probed(t.probe_hole(0).ticket, 30, 20, 0.0)  # 11..19 markers, 20.. dropped
    assert decision == ReadAgain(0, 20, "offset 30 arrived first")
    assert checkpoint(t, {0: 10}) == {0: 20}  # over the markers, not over 20


def test_a_broker_that_does_not_answer_reads_again_from_the_read_position() -> None:
    t = tracker()
    take(t, 0, [10])
    t.arrived(0, 30, 0.0)
    assert t.hole_probed(t.probe_hole(0).ticket, 30, None, 0.0) == ReadAgain(0, 11, "offset 30 arrived first")


def test_an_answer_about_a_hole_after_a_rebalance_is_dropped() -> None:
    t = tracker()
    take(t, 0, [10])
    t.arrived(0, 30, 0.0)
    ticket = t.probe_hole(0).ticket
    t.revoked()
    t.assigned({0: 10}, 1.0)
    assert t.hole_probed(ticket, 30, 11, 1.0) is Admission.SKIP
    assert t.ledgers[0].reread_since is None and t.ledgers[0].next_offset == 10


def test_a_checkpoint_while_a_hole_is_asked_about_does_not_drop_the_answer() -> None:
    t = tracker()
    take(t, 0, [10])
    t.arrived(0, 12, 0.0)
    ticket = t.probe_hole(0).ticket
    checkpoint(t, {0: 10})  # the timer's checkpoint ran while the agent waited for the broker
    assert t.hole_probed(ticket, 12, 12, 0.0) is Admission.PROCESS


def test_a_read_again_that_brings_nothing_is_sought_again() -> None:
    t = tracker()
    take(t, 0, [10])
    t.arrived(0, 30, 0.0)
    t.hole_probed(t.probe_hole(0).ticket, 30, 11, 0.0)
    assert t.rereads_due(REREAD - 0.1) == []
    assert t.rereads_due(REREAD) == [ReadAgain(0, 11, "none for 10 s")]
    assert t.rereads_due(REREAD + 1) == []  # asked again only after another stretch
    assert take(t, 0, [11]) == [Admission.PROCESS]
    assert t.rereads_due(100.0) == []


# ---------------------------------------------------------------------------- tails


def quiet_tail(t: InputTracker, now: float, end: int) -> Probe | None:
    [ticket] = t.quiet_partitions(now)
    return t.tail_end(ticket, end, now)


def test_a_tail_fetched_but_never_delivered_is_read_again() -> None:
    t = tracker()
    take(t, 0, range(10, 20), now=0.0)
    checkpoint(t, {0: 19})
    assert t.quiet_partitions(QUIET - 0.1) == []
    probe = quiet_tail(t, QUIET, end=50)
    assert probe is not None and probe.ticket.offset == 20
    assert t.tail_probed(probe.ticket, 50, 20, QUIET) == ReadAgain(0, 20, "none for 5 s, end offset 50")
    assert t.quiet_partitions(QUIET * 3) == []  # a reread is under way: the reread timer's business


def test_a_tail_of_markers_only_is_passed_and_committed_over() -> None:
    t = tracker()
    take(t, 0, range(10, 20))
    checkpoint(t, {0: 19})
    probe = quiet_tail(t, QUIET, end=22)
    assert probe is not None
    assert t.tail_probed(probe.ticket, 22, 22, QUIET) is None
    assert checkpoint(t, {}) == {0: 22}


def test_a_partition_at_its_end_is_not_probed() -> None:
    t = tracker()
    take(t, 0, range(10, 20))
    assert quiet_tail(t, QUIET, end=20) is None


def test_a_quiet_partition_is_asked_about_again_only_after_another_quiet_stretch() -> None:
    t = tracker()
    assert len(t.quiet_partitions(QUIET)) == 1
    assert t.quiet_partitions(QUIET + 1) == []
    assert len(t.quiet_partitions(2 * QUIET)) == 1


def test_no_partition_is_quiet_while_the_agent_waits_for_a_childs_parents_nor_a_stretch_after() -> None:
    t = tracker({0: 10, 1: 20})
    t.wait_started()
    assert t.quiet_partitions(3 * QUIET) == []
    t.wait_ended(3 * QUIET)
    assert t.quiet_partitions(4 * QUIET - 0.1) == []
    assert sorted(k.partition for k in t.quiet_partitions(4 * QUIET)) == [0, 1]


@pytest.mark.parametrize("hold", ["rebalancing", "checkpointing", "stopping", "slow checkpoint"])
def test_nothing_is_looked_into_while_the_input_may_be_held_back(hold: str) -> None:
    t = tracker()
    if hold == "rebalancing":
        t.revoked()
        t.assigned({0: 10}, 0.0)
        t.rebalancing = True
    elif hold == "checkpointing":
        t.checkpoint_started()
    elif hold == "stopping":
        t.stopping = True
    else:
        checkpoint(t, {}, now=QUIET, waited=1.0)  # its sends waited a second: the queue was held back
        assert t.quiet_partitions(2 * QUIET - 0.1) == []
        assert len(t.quiet_partitions(2 * QUIET)) == 1
        return
    assert t.quiet_partitions(QUIET) == []


def _asked(t: InputTracker) -> Probe:
    take(t, 0, range(10, 20))
    checkpoint(t, {0: 19})
    probe = quiet_tail(t, QUIET, end=50)
    assert probe is not None
    return probe


@pytest.mark.parametrize(
    "meanwhile",
    ["a record arrived", "a checkpoint ran", "a rebalance", "a rebalance began", "a reread was asked"],
)
def test_an_answer_about_a_tail_is_dropped_when_the_partition_changed_meanwhile(meanwhile: str) -> None:
    t = tracker()
    probe = _asked(t)
    if meanwhile == "a record arrived":
        assert t.arrived(0, 20, QUIET) is Admission.PROCESS
    elif meanwhile == "a checkpoint ran":
        checkpoint(t, {}, now=QUIET)
    elif meanwhile == "a rebalance":
        t.revoked()
        t.assigned({0: 20}, QUIET)
    elif meanwhile == "a rebalance began":
        t.revoked()
    else:
        t.arrived(0, 30, QUIET)
        t.hole_probed(t.probe_hole(0).ticket, 30, 20, QUIET)
    before = {p: (x.next_offset, x.reread_since) for p, x in t.ledgers.items()}
    assert t.tail_probed(probe.ticket, 50, 20, QUIET) is None
    assert {p: (x.next_offset, x.reread_since) for p, x in t.ledgers.items()} == before


def test_the_end_offset_answer_is_dropped_when_the_partition_changed_meanwhile() -> None:
    t = tracker()
    [ticket] = t.quiet_partitions(QUIET)
    t.arrived(0, 10, QUIET)
    assert t.tail_end(ticket, 50, QUIET) is None


def test_no_answer_from_the_broker_about_a_tail_decides_nothing() -> None:
    t = tracker()
    probe = _asked(t)
    assert t.tail_probed(probe.ticket, 50, None, QUIET) is None
    assert t.ledgers[0].reread_since is None


# ---------------------------------------------------------------------------- --until-idle


def test_taken_to_end_counts_stored_records_and_passed_markers() -> None:
    t = tracker()
    assert t.taken_to(3) is None
    take(t, 0, range(10, 15))
    assert t.taken_to(0) == 10 and t.settled_ticket(0) is None  # taken, not stored
    checkpoint(t, {0: 14})
    assert t.taken_to(0) == 15
    ticket = t.settled_ticket(0)
    assert ticket is not None and ticket.offset == 15
    assert t.tail_end(ticket, 17, 0.0) is not None
    assert t.tail_probed(ticket, 17, 17, 0.0) is None  # markers to the end
    assert t.taken_to(0) == 17


# ---------------------------------------------------------------------------- every interleaving


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(st.integers(min_value=0, max_value=30), max_size=40),
    markers=st.sets(st.integers(min_value=0, max_value=30), max_size=8),
    checkpoints=st.lists(st.integers(min_value=0, max_value=40), max_size=6),
)
def test_a_commit_never_passes_an_offset_neither_stored_nor_empty(
    records: list[int], markers: set[int], checkpoints: list[int]
) -> None:
    """Records arrive in any order (faust's drops and rereads), some offsets are markers; whatever the
    order, every committed offset below the commit was processed and stored, or is a marker."""
    t = tracker({0: 0})
    processed: list[int] = []
    stored: set[int] = set()
    taken: set[int] = set()
    committed = 0
    at = set(checkpoints)
    for i, offset in enumerate(records):
        if offset in markers:
            continue
        verdict = t.arrived(0, offset, 0.0)
        if verdict is Admission.HOLE:
            ticket = t.probe_hole(0).ticket
            first = next((o for o in itertools.count(ticket.offset) if o not in markers), offset)
            decision = t.hole_probed(ticket, offset, min(first, offset), 0.0)
            verdict = decision if isinstance(decision, Admission) else Admission.SKIP
        if verdict is Admission.PROCESS:  # strictly in offset order, nothing skipped but markers
            assert all(o in markers or o in taken for o in range(offset)) and offset not in taken
            taken.add(offset)
            processed.append(offset)
        if i in at and processed:
            stored.update(processed)
            offsets = checkpoint(t, {0: processed[-1]})
            processed.clear()
            committed = offsets.get(0, committed)
            assert all(o in stored or o in markers for o in range(committed))
