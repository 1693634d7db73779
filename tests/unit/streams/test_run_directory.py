"""The run directory's decision: a function of the log's records and the child's heads alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from olstream.contract import codec, wire
from olstream.contract.records import RunRef, RunStarted
from olstream.streams import state as st
from olstream.streams.mapping import MappingConfig
from olstream.streams.processor import apply, parent_resolver
from olstream.streams.run_directory import (
    DirectoryEntry,
    DirectoryLookup,
    Heads,
    NotCovered,
    ParentOutcome,
    Position,
    RunDirectory,
    start_position,
)
from olstream.streams.runid import epoch_millis

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CFG = MappingConfig()  # hierarchical job names, as by default
RESOLVE = parent_resolver(CFG, 1_000_000)


def run(
    partition: int,
    offset: int,
    rid: str,
    wf: str = "load",
    parent: RunRef | None = None,
    at: datetime = T0,
    namespace: str = "acme",
) -> RunStarted:
    return RunStarted(partition, offset, at, rid, "task", namespace, wf, "1", f"i-{rid}", at, parent=parent)


def register(d: RunDirectory, record: RunStarted, heads: dict[int, int] | None = None) -> None:
    raw = None if heads is None else wire.encode_heads(heads)
    d.add([start_position(record.partition, record.offset, codec.encode(record), raw)])


def child_of(parent_rid: str, partition: int = 1, offset: int = 5, wf: str = "step") -> RunStarted:
    return run(partition, offset, "child", wf=wf, parent=RunRef(parent_rid), at=T0 + timedelta(seconds=1))


def started(
    d: RunDirectory, child: RunStarted, heads: dict[int, int] | None
) -> tuple[st.RunState, DirectoryLookup]:
    lookup = DirectoryLookup(
        d, RESOLVE, child.partition, child.offset, heads, epoch_millis(child.append_time)
    )
    step = apply(child, CFG, lambda _key: None, 0, lookup)
    assert step.write is not None
    return step.write, lookup


def test_a_parent_on_another_log_partition_is_found_once_the_directory_covers_the_heads() -> None:
    d = RunDirectory()
    parent = run(0, 3, "p")
    child = child_of("p")
    heads = {0: 3, 1: 5}
    register(d, parent, {0: 3})
    with pytest.raises(NotCovered):  # partition 1 not read up to 5 yet: the child waits
        started(d, child, heads)
    d.add([Position(1, 5)])
    state, lookup = started(d, child, heads)
    assert state.parent is not None and state.parent.name == "load@1"
    assert state.job_path == "load@1.step@1" and state.run.name == "load@1.step@1"
    assert lookup.outcomes == {"p": ParentOutcome.FOUND}


def test_a_parent_not_in_the_log_up_to_the_heads_is_absent_and_later_starts_do_not_change_it() -> None:
    d = RunDirectory()
    child = child_of("p")
    heads = {0: 3, 1: 5}
    d.add([Position(0, 3), Position(1, 5)])
    state, lookup = started(d, child, heads)
    assert state.parent is None and state.run.name == "step@1"
    assert lookup.outcomes == {"p": ParentOutcome.ABSENT}
    register(d, run(0, 4, "p"))  # appended after the source read the child: above its heads
    again, _ = started(d, child, heads)
    assert again == state


def test_a_chain_over_other_partitions_waits_for_every_level_and_gets_the_full_path() -> None:
    d = RunDirectory()
    depth = 10
    records = []
    for level in range(depth):
        parent = None if level == 0 else RunRef(f"r{level - 1}")
        records.append(
            run(level, 0, f"r{level}", wf=f"w{level}", parent=parent, at=T0 + timedelta(seconds=level))
        )
    heads_of = {level: {p: 0 for p in range(level + 1)} for level in range(depth)}
    # the directory reads the deepest first: every level waits for the one above it
    leaf = records[-1]
    for level in reversed(range(depth)):
        register(d, records[level], heads_of[level])
        if level:
            with pytest.raises(NotCovered):
                started(d, leaf, heads_of[depth - 1])
    state, _ = started(d, leaf, heads_of[depth - 1])
    assert state.run.name == ".".join(f"w{level}@1" for level in range(depth))
    assert state.parent is not None and state.parent.name == ".".join(
        f"w{level}@1" for level in range(depth - 1)
    )
    assert state.root is not None and state.root.name == "w0@1"


def test_an_id_on_two_other_partitions_is_ambiguous_and_the_own_partition_wins() -> None:
    d = RunDirectory()
    register(d, run(0, 1, "p", wf="a"))
    register(d, run(2, 1, "p", wf="b"))
    d.add([Position(1, 5), Position(0, 9), Position(2, 9)])
    heads = {0: 9, 1: 5, 2: 9}
    state, lookup = started(d, child_of("p"), heads)
    assert state.parent is None and lookup.outcomes == {"p": ParentOutcome.AMBIGUOUS}
    register(d, run(1, 2, "p", wf="own"))
    state, _ = started(d, child_of("p"), heads)
    assert state.parent is not None and state.parent.name == "own@1"


def test_the_earliest_start_of_a_partition_is_the_run() -> None:
    d = RunDirectory()
    register(d, run(0, 1, "p", wf="first"))
    register(d, run(0, 2, "p", wf="second"))  # the worker refuses it as duplicate_start
    d.add([Position(1, 5)])
    state, _ = started(d, child_of("p"), {0: 2, 1: 5})
    assert state.parent is not None and state.parent.name == "first@1"


def test_a_parent_older_than_the_retention_in_record_time_is_too_old() -> None:
    d = RunDirectory(retention_ms=60_000)
    register(d, run(0, 1, "p", at=T0 - timedelta(minutes=2)))
    d.add([Position(1, 5)])
    state, lookup = started(d, child_of("p"), {0: 1, 1: 5})
    assert state.parent is None and lookup.outcomes == {"p": ParentOutcome.TOO_OLD}


def test_without_heads_only_the_own_partition_before_the_child_counts() -> None:
    d = RunDirectory()
    register(d, run(0, 1, "p", wf="other"))
    d.add([Position(1, 5)])
    state, lookup = started(d, child_of("p"), None)
    assert state.parent is None and lookup.outcomes == {"p": ParentOutcome.ABSENT}
    register(d, run(1, 2, "p", wf="own"))
    state, _ = started(d, child_of("p"), None)
    assert state.parent is not None and state.parent.name == "own@1"


def test_a_parent_the_worker_refuses_is_absent() -> None:
    d = RunDirectory()
    register(d, run(0, 1, "p", namespace="not a namespace!"))
    d.add([Position(1, 5)])
    state, lookup = started(d, child_of("p"), {0: 1, 1: 5})
    assert state.parent is None and lookup.outcomes == {"p": ParentOutcome.ABSENT}


def test_the_answer_does_not_depend_on_the_order_the_directory_read_the_partitions() -> None:
    records = [run(p, 0, f"r{p}", parent=RunRef(f"r{p - 1}") if p else None) for p in range(4)]
    heads = {p: 0 for p in range(4)}
    answers = []
    for order in ([0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]):
        d = RunDirectory()
        for p in order:
            register(d, records[p], heads)
        state, _ = started(d, records[3], heads)
        answers.append(state)
    assert answers[0] == answers[1] == answers[2]
    assert answers[0].run.name == "load@1.load@1.load@1.load@1"


def test_a_message_read_twice_is_one_entry() -> None:
    d = RunDirectory()
    register(d, run(0, 1, "p"))
    register(d, run(0, 1, "p"))
    assert d.entries == 1 and len(d.starts_of("p")) == 1


def test_heads_round_trip_and_bad_values_are_refused() -> None:
    heads = {0: 41, 2: 96, 1: 17, 3: -1}
    raw = wire.encode_heads(heads)
    assert raw == b"0:41,1:17,2:96"
    assert wire.decode_heads(raw) == {0: 41, 1: 17, 2: 96}
    assert wire.decode_heads(b"") == {}
    for bad in (b"x", b"0:1,0:2", b"0:-1", b"0:1,", b"\xff"):
        assert wire.decode_heads(bad) is None


def test_the_engine_run_id_is_read_without_decoding_as_decoding_reads_it() -> None:
    from olstream.eventlog.simulate import simulate
    from tests.support.memory_store import MemoryEventLogStore

    store = MemoryEventLogStore(4)
    simulate(store, 200, seed=3)
    starts = 0
    for row in store.all_rows():
        record = codec.decode(row.payload, row.partition, row.offset)
        if isinstance(record, RunStarted):
            starts += 1
            assert start_position(row.partition, row.offset, row.payload, None).engine_run_id == (
                record.engine_run_id
            )
    long_id = run(2**30, 2**60, "ü" * 5000)
    assert start_position(0, 0, codec.encode(long_id), None).engine_run_id == "ü" * 5000
    assert start_position(0, 0, b"\xc3\x01junk", None).engine_run_id is None
    assert starts == 200


def test_a_lookup_asks_the_directory_once_per_id_and_only_once_it_covers_the_heads() -> None:
    asked: list[str] = []

    class CountingDirectory(RunDirectory):
        def choose(
            self, engine_run_id: str, partition: int, offset: int, heads: Heads | None, child_ms: int
        ) -> tuple[ParentOutcome, RunStarted | None, DirectoryEntry | None]:
            asked.append(engine_run_id)
            return super().choose(engine_run_id, partition, offset, heads, child_ms)

    d = CountingDirectory()
    register(d, run(0, 3, "p"), {0: 3})
    child = child_of("p")
    lookup = DirectoryLookup(d, RESOLVE, child.partition, child.offset, {0: 3, 1: 5}, 0)
    with pytest.raises(NotCovered):  # not covered: nothing is kept, it is asked again later
        lookup("p")
    with pytest.raises(NotCovered):
        lookup("p")
    assert asked == []
    d.add([Position(1, 5)])
    first = lookup("p")
    assert first is not None and first.run.name == "load@1"
    assert lookup("p") is first  # the application after the agent's dry run: no second read
    assert asked == ["p"]
