"""Per-run state values and their pure transitions.

One ``RunState`` per engine run id, kept in the worker's table. Every field needed
to re-emit a run's events byte for byte is stored here (resolved parent and root
identities included), so a replayed record re-emits exactly what it emitted first.
Times are stored already formatted as RFC 3339 (UTC, microseconds, ``Z``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from olstream.contract.naming import (
    NamespaceError,
    child_job_path,
    job_segment,
    normalize_job_namespace,
    normalize_namespace,
    parent_path_on_record,
    with_job_namespace,
)
from olstream.contract.records import DatasetDeclared, Direction, RunEnded, RunRef, RunStarted
from olstream.shared.errors import OlstreamError
from olstream.streams.runid import epoch_millis, run_id


class StreamInputError(OlstreamError):
    """A well-formed record that cannot be applied to the run state (unknown run, conflicting end)."""

    def __init__(self, reason: str, detail: str, partition: int, offset: int) -> None:
        self.reason = reason
        self.partition = partition
        self.offset = offset
        super().__init__(f"record at log partition {partition}, offset {offset}: {detail}")


def format_time(t: datetime) -> str:
    """RFC 3339 in UTC with microseconds and a ``Z`` offset; naive datetimes are taken as UTC."""
    tz = t.tzinfo
    if tz is None:
        return t.isoformat(timespec="microseconds") + "Z"
    if tz is not UTC:
        t = t.astimezone(UTC)
    return t.isoformat(timespec="microseconds")[:-6] + "Z"  # in C; "+00:00" becomes "Z"


@dataclass(frozen=True, slots=True)
class JobRun:
    """A run's OpenLineage identity: its job (namespace, name) and its run id."""

    namespace: str
    name: str
    run_id: str


@dataclass(frozen=True, slots=True)
class DatasetRef:
    namespace: str
    name: str
    version: str | None = None
    declared_at: int = -1  # log offset of the declaration that added it (-1: a state stored before it)


@dataclass(frozen=True, slots=True)
class RunEnd:
    status: str
    end_time: str
    end_ms: int
    error_message: str | None = None
    error_type: str | None = None
    stack_trace: str | None = None
    position: tuple[int, int] = (0, 0)


@dataclass(frozen=True, slots=True)
class RunState:
    engine_run_id: str
    task_id: str
    namespace: str
    workflow_type: str
    workflow_version: str
    workflow_instance: str
    principal: str | None
    start_time: str
    start_ms: int
    nominal_start_time: str | None
    nominal_end_time: str | None
    supersedes: str | None
    run: JobRun
    parent: JobRun | None
    root: JobRun | None
    start_position: tuple[int, int]
    inputs: tuple[DatasetRef, ...] = ()
    outputs: tuple[DatasetRef, ...] = ()
    inputs_at_start: int = 0
    outputs_at_start: int = 0
    end: RunEnd | None = None
    home: int = 0  # the input (Kafka) partition whose changelog holds this state
    job_path: str | None = None  # hierarchical names: the run's job path (`naming`); flat: None
    last_offset: int = -1  # log offset of the last record that changed this state (replays are at or below)

    @property
    def key(self) -> str:
        """The run's key in the worker's table (`state_key`)."""
        return state_key(self.start_position[0], self.engine_run_id)

    def evolve(
        self,
        inputs: tuple[DatasetRef, ...] | None = None,
        outputs: tuple[DatasetRef, ...] | None = None,
        end: RunEnd | None = None,
        last_offset: int | None = None,
    ) -> RunState:
        """A copy with new datasets or a new end (``dataclasses.replace`` costs ~3x as much)."""
        return RunState(
            engine_run_id=self.engine_run_id,
            task_id=self.task_id,
            namespace=self.namespace,
            workflow_type=self.workflow_type,
            workflow_version=self.workflow_version,
            workflow_instance=self.workflow_instance,
            principal=self.principal,
            start_time=self.start_time,
            start_ms=self.start_ms,
            nominal_start_time=self.nominal_start_time,
            nominal_end_time=self.nominal_end_time,
            supersedes=self.supersedes,
            run=self.run,
            parent=self.parent,
            root=self.root,
            start_position=self.start_position,
            inputs=self.inputs if inputs is None else inputs,
            outputs=self.outputs if outputs is None else outputs,
            inputs_at_start=self.inputs_at_start,
            outputs_at_start=self.outputs_at_start,
            end=self.end if end is None else end,
            home=self.home,
            job_path=self.job_path,
            last_offset=self.last_offset if last_offset is None else last_offset,
        )

    @property
    def tree_root(self) -> JobRun:
        """The job that keys this run's events: the root of its tree, else its parent, else itself."""
        return self.root or self.parent or self.run


def state_key(log_partition: int, engine_run_id: str) -> str:
    """A run's key in the worker's table: its log partition and engine run id.

    An engine run id is unique within one log partition only (an engine may reuse one on another
    partition), so two runs with the same id on two log partitions are two runs, whichever worker
    owns which partition.
    """
    return f"{log_partition}:{engine_run_id}"


# ---------------------------------------------------------------- transitions

Lookup = Callable[[str], "RunState | None"]


def _identity_from_ref(ref: RunRef, prefix: str, path: str | None = None) -> JobRun | None:
    """The run a complete reference names; its job name is `prefix` + `path` (else its own segment)."""
    if not ref.is_complete:
        return None
    # complete: none of them is None (an empty string is a value, named as the run's own would be)
    assert ref.namespace is not None and ref.workflow_type is not None and ref.workflow_version is not None
    assert ref.workflow_instance is not None and ref.start_time is not None
    return JobRun(
        ref.namespace,
        prefix + (path or job_segment(ref.workflow_type, ref.workflow_version)),
        run_id(ref.namespace, ref.workflow_type, ref.workflow_instance, ref.engine_run_id, ref.start_time),
    )


@dataclass(frozen=True, slots=True)
class Started:
    state: RunState
    parent_not_visible: bool
    job_path_too_long: bool = False


@dataclass(frozen=True, slots=True)
class Lineage:
    """A starting run's resolved place in its tree."""

    parent: JobRun | None
    root: JobRun | None
    parent_not_visible: bool = False
    parent_path: str | None = None  # hierarchical names only: the parent's job path


def _invalid_namespace(
    e: NamespaceError, field_name: str, record: RunStarted | DatasetDeclared
) -> StreamInputError:
    return StreamInputError("invalid_namespace", f"{field_name}: {e}", record.partition, record.offset)


def _normalized_ref(ref: RunRef | None, label: str, record: RunStarted) -> RunRef | None:
    try:
        return None if ref is None else with_job_namespace(ref)
    except NamespaceError as e:
        raise _invalid_namespace(e, f"{label}.namespace", record) from None


def _state_path(prefix: str, state: RunState) -> str | None:
    """A visible parent's job path; for a state stored by an earlier version or in flat mode, the
    path its emitted name implies (so the child extends exactly the name the parent's events carry)."""
    if state.job_path is not None:
        return state.job_path
    return state.run.name[len(prefix) :] if state.run.name.startswith(prefix) else None


def resolve_lineage(record: RunStarted, prefix: str, lookup: Lookup, hierarchical: bool = False) -> Lineage:
    """The parent, root and (hierarchical names) parent path of a starting run.

    The child's own record wins; an incomplete reference is resolved from this worker's state; an
    unresolvable parent yields no parent edge rather than a guess. With hierarchical names the
    parent's job path must be known too: from the record (`naming.parent_path_on_record`), else
    from the visible parent's state, which then gives the parent's identity as well; else no edge.
    """
    ref = record.parent
    if ref is None:
        return Lineage(None, None)
    parent_state: RunState | None = None
    parent_path: str | None = None
    parent: JobRun | None
    if hierarchical:
        parent_path = parent_path_on_record(ref, record.root)
        if parent_path is not None:
            parent = _identity_from_ref(ref, prefix, parent_path)
        else:
            parent_state = lookup(ref.engine_run_id)
            parent_path = None if parent_state is None else _state_path(prefix, parent_state)
            if parent_state is None or parent_path is None:
                return Lineage(None, None, parent_not_visible=True)
            parent = parent_state.run
    else:
        parent = _identity_from_ref(ref, prefix)
        if parent is None:
            parent_state = lookup(ref.engine_run_id)
            if parent_state is None:
                return Lineage(None, None, parent_not_visible=True)
            parent = parent_state.run
    assert parent is not None
    root: JobRun | None
    if record.root is None:
        # no root given: the parent's own root when the parent is in this state, else the parent
        if parent_state is None:
            parent_state = lookup(ref.engine_run_id)
        root = (parent_state.root or parent_state.run) if parent_state is not None else parent
    else:
        root = _identity_from_ref(record.root, prefix)  # a root's path is its own segment
        if root is None:
            if parent_state is not None and parent_state.root is not None:
                root = parent_state.root
            else:
                root_state = lookup(record.root.engine_run_id)
                root = root_state.run if root_state is not None else None
    return Lineage(parent, root, parent_path=parent_path)


def normalized_start(record: RunStarted) -> RunStarted:
    """The record with its namespaces normalized (`naming`); StreamInputError names an invalid one."""
    try:
        namespace = normalize_job_namespace(record.namespace)
    except NamespaceError as e:
        raise _invalid_namespace(e, "namespace", record) from None
    parent_ref = _normalized_ref(record.parent, "parent", record)
    root_ref = _normalized_ref(record.root, "root", record)
    if namespace != record.namespace or parent_ref is not record.parent or root_ref is not record.root:
        record = replace(record, namespace=namespace, parent=parent_ref, root=root_ref)
    return record


def start(record: RunStarted, prefix: str, lookup: Lookup, home: int, hierarchical: bool = False) -> Started:
    """The state of a run that just started (namespaces normalized: `naming`).

    Flat names: ``{prefix}{type}@{version}``. Hierarchical names: ``{prefix}{job path}``, the path
    extending the parent's (`naming.child_job_path`); a run whose parent's path is unknown, or
    whose path would exceed the limit, starts a path of its own and has no parent edge.
    """
    record = normalized_start(record)
    lineage = resolve_lineage(record, prefix, lookup, hierarchical)
    parent, root = lineage.parent, lineage.root
    segment = job_segment(record.workflow_type, record.workflow_version)
    job_path: str | None = None
    too_long = False
    if hierarchical:
        job_path = segment
        if lineage.parent_path is not None:
            job_path, extends = child_job_path(lineage.parent_path, segment)
            if not extends:
                parent, root, too_long = None, None, True
    own = JobRun(
        record.namespace,
        prefix + (job_path or segment),
        run_id(
            record.namespace,
            record.workflow_type,
            record.workflow_instance,
            record.engine_run_id,
            record.start_time,
        ),
    )
    state = RunState(
        engine_run_id=record.engine_run_id,
        task_id=record.task_id,
        namespace=record.namespace,
        workflow_type=record.workflow_type,
        workflow_version=record.workflow_version,
        workflow_instance=record.workflow_instance,
        principal=record.principal,
        start_time=format_time(record.start_time),
        start_ms=epoch_millis(record.start_time),
        nominal_start_time=None
        if record.nominal_start_time is None
        else format_time(record.nominal_start_time),
        nominal_end_time=None if record.nominal_end_time is None else format_time(record.nominal_end_time),
        supersedes=record.supersedes,
        run=own,
        parent=parent,
        root=root,
        start_position=(record.partition, record.offset),
        home=home,
        job_path=job_path,
        last_offset=record.offset,
    )
    return Started(state, lineage.parent_not_visible, too_long)


def _replayed(state: RunState, record: DatasetDeclared | RunEnded) -> bool:
    """A record at or below the last offset that changed the state was applied before."""
    return record.offset <= state.last_offset


def declare(state: RunState, record: DatasetDeclared, *, redriven: bool = False) -> RunState | None:
    """The state with the dataset added, or None for a replay or a repeat of a declared dataset.

    After the run's end, any declaration not applied before (a new dataset, or a declared one again,
    whatever its version) is refused as `declaration_after_end`: it can no longer reach the run's
    events, and it must not vanish silently. A `redriven` declaration (refused once, sent again)
    below the last offset is a replay only when it is the one that added its dataset.
    """
    if _replayed(state, record) and (not redriven or added_by(state, record) is not None):
        return None
    current = state.inputs if record.direction is Direction.INPUT else state.outputs
    try:
        namespace = normalize_namespace(record.dataset_namespace)
    except NamespaceError as e:
        raise _invalid_namespace(e, "dataset_namespace", record) from None
    if state.end is None:
        for d in current:
            if d.namespace == namespace and d.name == record.dataset_name:
                return None
    else:
        raise StreamInputError(
            "declaration_after_end",
            f"dataset {namespace}/{record.dataset_name} declared after run {record.engine_run_id} ended",
            record.partition,
            record.offset,
        )
    added = (*current, DatasetRef(namespace, record.dataset_name, record.version, record.offset))
    last = max(state.last_offset, record.offset)  # a re-driven declaration may lie below it
    if record.direction is Direction.INPUT:
        return state.evolve(inputs=added, last_offset=last)
    return state.evolve(outputs=added, last_offset=last)


def added_by(state: RunState, record: DatasetDeclared) -> DatasetRef | None:
    """The dataset this declaration added to the run (a replayed one), or None when it added none."""
    for d in state.inputs if record.direction is Direction.INPUT else state.outputs:
        if d.declared_at == record.offset:
            return d
    return None


def end(state: RunState, record: RunEnded) -> RunState | None:
    """The finished state, or None when the same end was already applied (a replay)."""
    status = record.status.value
    if state.end is not None:
        if state.end.status == status:
            return None
        raise StreamInputError(
            "conflicting_end",
            f"run {record.engine_run_id} already ended with status {state.end.status!r} "
            f"(log partition {state.end.position[0]}, offset {state.end.position[1]}); "
            f"second end has status {status!r}",
            record.partition,
            record.offset,
        )
    err = record.error
    finished = RunEnd(
        status=status,
        end_time=format_time(record.end_time),
        end_ms=epoch_millis(record.end_time),
        error_message=None if err is None else err.message,
        error_type=None if err is None else err.type,
        stack_trace=None if err is None else err.stack_trace,
        position=(record.partition, record.offset),
    )
    return state.evolve(end=finished, last_offset=max(state.last_offset, record.offset))
