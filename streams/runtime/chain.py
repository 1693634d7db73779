"""The record path: seven steps, each handed the next, all with one contract (`Step.submit`).

faust's stream hands each input record, as a `Taken`, to the first step; each step does its one
thing and submits the record to the next, or drops it (a record not to be taken: the ledger said
so, or the group took its partition). A record that had its effect early (a duplicate, a refused
record, the source's marker of a rejected row) is marked `done` and passed on untouched, so the
checkpoint still counts its offset. docs/worker.md draws the chain; ``tests/unit/streams/runtime/
test_chain.py`` holds the drawing and `STEPS` together.

A rebalance joins, then closes the chain (`StreamWorker.on_partitions_revoked`): under the gate's
lock the checkpoint step commits its batch, then the steps forget the assignment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from olstream.contract.records import Record
    from olstream.streams.partition_state import PartitionState
    from olstream.streams.processor import Output
    from olstream.streams.run_directory import DirectoryLookup


@dataclass(slots=True)
class Taken:
    """One input record on its way along the chain, with what the steps learned about it."""

    event: Any  # faust's event: its message (partition, offset, headers) and value
    partition: int  # input partition
    offset: int  # input offset
    identity: int = -1  # the partition's ledger when admitted (`InputTracker.owns` checks it later)
    record: Record | None = None  # decoded (by the parent wait, for a RunStarted with heads; else apply)
    lookup: DirectoryLookup | None = None  # the run directory's lookup of a RunStarted with heads
    state: PartitionState | None = None  # its input partition's state transaction (the gate opens it)
    log_partition: int | None = None  # its position in the event log, from its headers
    log_offset: int | None = None
    redriven: bool = False  # an error record sent again (`olstream errors redrive`)
    outputs: tuple[Output, ...] = ()  # its RunEvents, rendered by the pure step
    done: bool = False  # had its effect already: the later steps pass it on to the checkpoint


class Step(Protocol):
    """A step of the chain: does its part for the record, then submits it to the next step."""

    async def submit(self, item: Taken) -> None: ...


# The steps in order: (class, module under streams/runtime). docs/worker.md draws the same.
STEPS: tuple[tuple[str, str], ...] = (
    ("AdmitInOrder", "input_order.py"),
    ("ParentWait", "parent_wait.py"),
    ("MemberGate", "member_gate.py"),
    ("JudgeMarks", "mark_judge.py"),
    ("ApplyRecord", "apply_record.py"),
    ("SendEvents", "send_events.py"),
    ("BatchCheckpoint", "checkpoint.py"),
)
