"""The record path: seven steps, each handed the next, all with one contract (`Step`).

faust's stream hands each input record, as an `InputRecord` (what the record is, never changed), to
the first step. The first step admits it as a `Taken` (the record and what the steps find about
it); each step does its one thing and submits it to the next, or drops it (a record not to be
taken: the ledger said so, or the group took its partition). A record that had its effect early (a
duplicate, a refused record, the source's marker of a rejected row) is marked `done` and passed on
untouched, so the checkpoint still counts its offset. docs/worker.md draws the chain;
``tests/unit/streams/runtime/test_chain.py`` holds the drawing and `STEPS` together.

**The life cycle is the chain's too.** Besides `submit`, every step has the calls the worker makes
on the chain as a whole, and passes each down to the next step as it passes a record (`Link`): a
step takes part where it has something to do.

- `assign(partitions)`: a new assignment. The gate reads where the group stands and the partitions'
  run states, then starts the assignment's ledgers.
- `join()`: finish what is in flight: the batch is checkpointed.
- `close()`: a revocation. The gate joins the chain and then has it forget the assignment, under its
  lock, so nothing of a revoked partition is written afterwards.
- `poll()`: the timers' periodic work, each step's when it is due: reads again that brought nothing,
  a fenced worker's deadline to rejoin, a quiet batch's checkpoint.

**A fence is a result.** `submit`, `join` and `poll` return the `Fenced` that made the batch's
transaction uncommittable (exactly_once), or None. It travels back up the chain to the gate, which
owns the lock and the membership, and drops the batch there (`MemberGate.abandon`). Nothing is
wired between steps after they are built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from olstream.streams.input_record import InputRecord

if TYPE_CHECKING:
    from olstream.contract.records import Record
    from olstream.streams.partition_state import PartitionState
    from olstream.streams.processor import Output
    from olstream.streams.run_directory import DirectoryLookup
    from olstream.streams.runtime.transaction_errors import Fenced


@dataclass(slots=True)
class Taken:
    """An admitted record on its way along the chain: the record (`input`, never changed) and what
    the steps found, each field set by the step its comment names and read only by later steps."""

    input: InputRecord
    identity: int  # step 1: its partition's ledger when admitted (the gate checks it still owns it)
    record: Record | None = None  # step 2 (a RunStarted with heads) or step 5: the decoded record
    lookup: DirectoryLookup | None = None  # step 2: the run directory's lookup of a RunStarted with heads
    state: PartitionState | None = None  # step 3: its input partition's state transaction
    outputs: tuple[Output, ...] = ()  # step 5: its RunEvents, rendered by the pure step
    done: bool = False  # step 4 or 5: had its effect already; the later steps pass it to the checkpoint


@dataclass(slots=True)
class ChainReport:
    """What the steps report to the worker (its --until-idle check and its last line); each field
    is written by the one step its comment names."""

    batched: int = 0  # step 7: records in the batch, not yet checkpointed
    processing_seconds: float = 0.0  # step 3: in the steps after the gate (full batches' checkpoints too)
    full_batch_seconds: float = 0.0  # step 7: in the checkpoints of full batches
    checkpoint_seconds: float = 0.0  # step 7: in every checkpoint


Item = TypeVar("Item", contravariant=True)


class Step(Protocol[Item]):
    """A step of the chain: its part of a record, and of the chain's life cycle (module docstring)."""

    async def submit(self, item: Item) -> Fenced | None: ...

    async def assign(self, partitions: list[int]) -> None: ...

    async def join(self) -> Fenced | None: ...

    async def close(self) -> None: ...

    async def poll(self) -> Fenced | None: ...


class Link:
    """A step's life cycle passed down to the next step; a step overrides the calls it takes part in."""

    next: Step[Taken]

    async def assign(self, partitions: list[int]) -> None:
        await self.next.assign(partitions)

    async def join(self) -> Fenced | None:
        return await self.next.join()

    async def close(self) -> None:
        await self.next.close()

    async def poll(self) -> Fenced | None:
        return await self.next.poll()


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
