"""One pure processing step: a decoded record + the run state it touches -> state write + events.

No faust here: the agent reads the state it needs through ``lookup``, stores
``Step.write`` under the run's engine run id and sends ``Step.outputs`` in order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from olstream.contract import wire
from olstream.contract.records import DatasetDeclared, Direction, Record, RunEnded, RunStarted
from olstream.streams import state as st
from olstream.streams.mapping import (
    TERMINAL_EVENT_TYPES,
    MappingConfig,
    Running,
    event_key,
    running_event,
    start_event,
    terminal_event,
)


@dataclass(frozen=True, slots=True)
class Output:
    key: bytes
    value: bytes
    event_type: str  # `wire.HEADER_EVENT_TYPE`
    run_id: str  # the event's run.runId (`wire.HEADER_RUN_ID`)
    event_time: str  # its eventTime as written (`wire.HEADER_EVENT_TIME`)
    job_namespace: str  # `wire.HEADER_JOB_NAMESPACE`
    job_name: str  # `wire.HEADER_JOB_NAME`

    def headers(self) -> list[tuple[str, bytes]]:
        """The event's Kafka headers (contract.md, events topic)."""
        return [
            (wire.HEADER_RUN_ID, self.run_id.encode("ascii")),
            (wire.HEADER_EVENT_TYPE, self.event_type.encode("ascii")),
            (wire.HEADER_EVENT_TIME, self.event_time.encode("ascii")),
            (wire.HEADER_JOB_NAMESPACE, self.job_namespace.encode("utf-8")),
            (wire.HEADER_JOB_NAME, self.job_name.encode("utf-8")),
        ]


@dataclass(frozen=True, slots=True)
class Step:
    key: str  # the run's key in the table (`state.state_key`): where `write` is stored
    write: st.RunState | None = None
    outputs: tuple[Output, ...] = ()
    parent_not_visible: bool = False
    job_path_too_long: bool = False
    replay: bool = False


def _start_output(cfg: MappingConfig, s: st.RunState) -> Output:
    run, value = s.run, start_event(cfg, s)
    return Output(event_key(s), value, "START", run.run_id, s.start_time, run.namespace, run.name)


def _running_output(
    cfg: MappingConfig, s: st.RunState, record: DatasetDeclared, added: st.DatasetRef
) -> Output:
    """The RUNNING event of the declaration that added `added`: a function of the state's run and the
    record alone, so a replay of the record renders the same bytes. Its eventTime is the run's start
    (Marquez sets a run's start from every START and RUNNING event); the declaration's time is the
    `workflow` facet's `declaredAt`."""
    new = (added,)
    running = (
        Running(st.format_time(record.time), inputs=new)
        if record.direction is Direction.INPUT
        else Running(st.format_time(record.time), outputs=new)
    )
    run, value = s.run, running_event(cfg, s, running)
    return Output(event_key(s), value, "RUNNING", run.run_id, s.start_time, run.namespace, run.name)


def _terminal_output(cfg: MappingConfig, s: st.RunState) -> Output:
    assert s.end is not None
    run, event_type = s.run, TERMINAL_EVENT_TYPES[s.end.status]
    value = terminal_event(cfg, s)
    return Output(event_key(s), value, event_type, run.run_id, s.end.end_time, run.namespace, run.name)


def _unknown(record: DatasetDeclared | RunEnded, what: str) -> st.StreamInputError:
    return st.StreamInputError(
        "unknown_run",
        f"{what} for unknown run {record.engine_run_id!r} (never started, or evicted after retention)",
        record.partition,
        record.offset,
    )


def _in_log_partition(lookup: st.Lookup, log_partition: int) -> st.Lookup:
    """Engine run id -> the state of that run on this log partition (`state.state_key`).

    The run itself, and its parents and roots for incomplete references, are looked up only among
    runs of the record's own log partition. Those are always applied before the record (one log
    partition is one ordered stream), so the result does not depend on Kafka partition counts,
    worker assignment or timing, and an engine run id reused on another log partition is another run.
    """

    def get(engine_run_id: str) -> st.RunState | None:
        return lookup(st.state_key(log_partition, engine_run_id))

    return get


def parent_resolver(
    cfg: MappingConfig, max_event_bytes: int
) -> Callable[[RunStarted, st.Lookup], st.RunState | None]:
    """A parent's record -> its state as the worker would have stored it, or None where the worker
    refuses it (an invalid namespace; a START above `max_event_bytes`): for the run directory."""

    def resolve(record: RunStarted, lookup: st.Lookup) -> st.RunState | None:
        try:
            started = st.start(record, cfg.job_prefix, lookup, 0, cfg.hierarchical)
        except st.StreamInputError:
            return None
        if len(start_event(cfg, started.state)) > max_event_bytes:
            return None
        return started.state

    return resolve


def apply(
    record: Record,
    cfg: MappingConfig,
    lookup: st.Lookup,
    home: int,
    parents: st.Lookup | None = None,
    *,
    redriven: bool = False,
) -> Step:
    """Apply one record; raises StreamInputError for input that cannot be applied.

    `lookup` reads the table by state key (`state.state_key`); the step's `write` goes under `key`.
    `parents` finds a starting run's parent and root by engine run id (the run directory, for a
    record with heads); without it, only among the runs of the record's own log partition.
    `redriven`: a refused record sent again (`olstream errors redrive`); a declaration below the
    state's last offset is then new unless it is the one that added its dataset (`state.declare`).
    """
    rid = record.engine_run_id
    key = st.state_key(record.partition, rid)
    local = _in_log_partition(lookup, record.partition)
    current = local(rid)
    if isinstance(record, RunStarted):
        if current is not None:
            if current.start_position != (record.partition, record.offset):
                raise st.StreamInputError(
                    "duplicate_start",
                    f"run {rid!r} already started at log partition {current.start_position[0]}, "
                    f"offset {current.start_position[1]}",
                    record.partition,
                    record.offset,
                )
            if current.end is not None:
                # the run already ended, and the agent stores state only after its events were
                # acknowledged: the START was delivered; re-sending it after the terminal event
                # would reopen the run in consumers such as Marquez
                return Step(key, replay=True)
            # replay: re-emit the identical START from the stored state, never a new one
            return Step(key, outputs=(_start_output(cfg, current),), replay=True)
        started = st.start(
            record, cfg.job_prefix, local if parents is None else parents, home, cfg.hierarchical
        )
        return Step(
            key,
            write=started.state,
            outputs=(_start_output(cfg, started.state),),
            parent_not_visible=started.parent_not_visible,
            job_path_too_long=started.job_path_too_long,
        )
    if isinstance(record, DatasetDeclared):
        if current is None:
            raise _unknown(record, "dataset declaration")
        declared = st.declare(current, record, redriven=redriven)
        if not cfg.running_events:
            return Step(key, write=declared, replay=declared is None)
        if declared is None:
            # a repeat adds no event; a replay of the declaration that added a dataset re-sends its
            # identical RUNNING event while the run is open, never after its end (as a START's replay)
            added = st.added_by(current, record) if current.end is None else None
            replayed = () if added is None else (_running_output(cfg, current, record, added),)
            return Step(key, outputs=replayed, replay=True)
        new = declared.inputs[-1] if record.direction is Direction.INPUT else declared.outputs[-1]
        return Step(key, write=declared, outputs=(_running_output(cfg, declared, record, new),))
    if current is None:
        raise _unknown(record, "run end")
    ended = st.end(current, record)
    if ended is None:
        return Step(key, outputs=(_terminal_output(cfg, current),), replay=True)
    return Step(key, write=ended, outputs=(_terminal_output(cfg, ended),))
