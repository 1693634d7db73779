"""The writer API engines and SDKs use to append a run's durable records to the event log.

    writer = EventLogWriter(open_store("sqlite:///tmp/events.db", create=True))
    run = writer.run_started(namespace="billing", workflow_type="invoice", workflow_version="3",
                             workflow_instance="invoice-2024-05", task_id="tenant-7")
    run.dataset_input("orders", "postgres://db:5432", "shop.public.orders")
    out = run.dataset("report", "s3://reports", "invoices/2024-05.parquet")
    out.write()
    run.run_ended("completed")

Every record of a run lands in the partition chosen from its workflow instance
(``blake2b(instance) mod partitions``, stable across processes and Python versions).
Outside ``with writer.batch():`` each record is its own transaction; inside, records are
buffered and appended in one transaction when the block ends (or every `batch_size` records).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from olstream.contract.codec import offset_encoder, tail_fields, values_encoder
from olstream.contract.naming import (
    child_job_path,
    job_segment,
    parent_path_on_record,
)
from olstream.contract.records import (
    DatasetDeclared,
    Direction,
    Record,
    RunEnded,
    RunError,
    RunRef,
    RunStarted,
    RunStatus,
)
from olstream.contract.times import EARLIEST
from olstream.eventlog.fields import (
    check_record_times,
    checked_namespace,
    checked_ref,
    optional_text,
    optional_time,
    parse_status,
    require_text,
    require_time,
)
from olstream.eventlog.store import EventLogStore

Clock = Callable[[], datetime]
_CLOCK_FIELD = "append_time (the writer's clock())"
_DECLARED_TAIL = (
    "append_time",
    "engine_run_id",
    "direction",
    "key",
    "dataset_namespace",
    "dataset_name",
    "version",
    "time",
)
_ENDED_TAIL = ("append_time", "engine_run_id", "status", "end_time", "error")
_STARTED_TAIL = (
    "append_time",
    "engine_run_id",
    "task_id",
    "namespace",
    "workflow_type",
    "workflow_version",
    "workflow_instance",
    "principal",
    "start_time",
    "nominal_start_time",
    "nominal_end_time",
    "parent",
    "root",
    "supersedes",
)


def partition_for(workflow_instance: str, partition_count: int) -> int:
    """The partition every record of a run of `workflow_instance` goes to (stable hash)."""
    digest = hashlib.blake2b(workflow_instance.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partition_count


def _check_field_order() -> None:
    """The writer passes each record's fields to the encoder as values in schema order."""
    for record_type, expected in (
        (RunStarted, _STARTED_TAIL),
        (DatasetDeclared, _DECLARED_TAIL),
        (RunEnded, _ENDED_TAIL),
    ):
        if tail_fields(record_type) != expected:
            raise RuntimeError(f"avro/{record_type.__name__}.avsc changed its field order: update writer.py")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class EventLogWriter:
    """Appends runs' records to an event-log store."""

    def __init__(
        self,
        store: EventLogStore,
        *,
        clock: Clock | None = None,
        new_run_id: Callable[[], str] | None = None,
        batch_size: int = 10_000,
    ) -> None:
        self.store = store
        self._partition_count = len(store.partitions())
        self._clock = clock or _utc_now
        self._new_run_id = new_run_id or (lambda: str(uuid.uuid4()))
        self._batch_size = batch_size
        self._batch_depth = 0
        self._pending: list[tuple[int, Callable[[int], bytes]]] = []
        self.records_written = 0
        self._partitions_of: dict[str, int] = {}  # a small cache: instances repeat
        _check_field_order()

    @property
    def partition_count(self) -> int:
        return self._partition_count

    def partition_for(self, workflow_instance: str) -> int:
        partition = self._partitions_of.get(workflow_instance)
        if partition is None:
            partition = partition_for(workflow_instance, self._partition_count)
            if len(self._partitions_of) >= 10_000:
                self._partitions_of.clear()
            self._partitions_of[workflow_instance] = partition
        return partition

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Buffer appends inside the block and write them in one transaction at its end."""
        self._batch_depth += 1
        try:
            yield
        except BaseException:
            self._batch_depth -= 1
            if self._batch_depth == 0:
                self._pending.clear()
            raise
        self._batch_depth -= 1
        if self._batch_depth == 0:
            self.flush()

    def flush(self) -> None:
        """Append everything buffered so far (one transaction).

        If the store raises, the transaction rolled back and the buffered records are dropped:
        nothing of them was written, and the caller decides whether to write them again.
        """
        if self._pending:
            pending, self._pending = self._pending, []
            self.store.append_many(pending)
            self.records_written += len(pending)

    def append_record(self, record: Record) -> None:
        """Append a record built elsewhere, in its own `partition`; the store assigns its offset.

        Raises ValueError naming the field when a value does not fit, a time included (`times`).
        """
        check_record_times(record)
        self._append_build(record.partition, offset_encoder(record))

    def _append_build(self, partition: int, build: Callable[[int], bytes]) -> None:
        self._pending.append((partition, build))
        if self._batch_depth == 0 or len(self._pending) >= self._batch_size:
            self.flush()

    def now(self) -> datetime:
        """The clock's time, for a record's append_time: aware, and in the range records carry."""
        t = self._clock()
        if type(t) is not datetime or t.tzinfo is not UTC or t < EARLIEST:  # fast: a UTC datetime
            require_time(_CLOCK_FIELD, t)
        return t

    def run_started(
        self,
        *,
        namespace: str,
        workflow_type: str,
        workflow_version: str,
        workflow_instance: str,
        task_id: str,
        engine_run_id: str | None = None,
        principal: str | None = None,
        start_time: datetime | None = None,
        nominal_start_time: datetime | None = None,
        nominal_end_time: datetime | None = None,
        parent: RunHandle | RunRef | None = None,
        root: RunHandle | RunRef | None = None,
        supersedes: str | None = None,
    ) -> RunHandle:
        """Append a RunStarted and return the handle for the run's further records.

        `parent`/`root` may be a handle (full coordinates) or a RunRef (possibly with only
        `engine_run_id`). A child given a parent handle but no root inherits the parent's root
        (the parent itself when the parent has no parent); otherwise root stays None.

        Namespaces are normalized (`naming.normalize_namespace`; NamespaceError, a ValueError, when
        impossible). The returned handle knows the run's job path (`naming`) when its parent's is
        known: always for a root, and for a child of a handle that knows its own.
        """
        append_time = self.now()
        run_id = require_text("engine_run_id", self._new_run_id() if engine_run_id is None else engine_run_id)
        parent_ref = parent.ref if isinstance(parent, RunHandle) else parent
        root_ref = root.ref if isinstance(root, RunHandle) else root
        if root_ref is None and isinstance(parent, RunHandle):
            root_ref = parent.tree_root
        if parent_ref is not None:
            parent_ref = checked_ref("parent", parent_ref)
        if root_ref is not None:
            root_ref = checked_ref("root", root_ref)
        for label, text in (
            ("workflow_instance", workflow_instance),
            ("task_id", task_id),
            ("workflow_type", workflow_type),
            ("workflow_version", workflow_version),
        ):
            if type(text) is not str or not text.strip():
                require_text(label, text)  # raises, naming the field
        namespace = checked_namespace("namespace", namespace, job=True)
        segment = job_segment(workflow_type, workflow_version)
        parent_path = None if parent_ref is None else parent_path_on_record(parent_ref, root_ref)
        if parent_ref is None:
            job_path: str | None = segment
        elif parent_path is not None:
            job_path = child_job_path(parent_path, segment)[0]
        else:
            # the worker names this run from a parent visible in its state, or as a root: the
            # writer cannot know which, so it claims no path (`naming`, docs/naming.md)
            job_path = None
        partition = self.partition_for(workflow_instance)
        start = require_time("start_time", start_time or append_time)
        principal = optional_text("principal", principal)
        nominal_start_time = optional_time("nominal_start_time", nominal_start_time)
        nominal_end_time = optional_time("nominal_end_time", nominal_end_time)
        supersedes = optional_text("supersedes", supersedes)
        # No record object: the values go straight to the encoder, in schema order (_STARTED_TAIL).
        values = (
            append_time,
            run_id,
            task_id,
            namespace,
            workflow_type,
            workflow_version,
            workflow_instance,
            principal,
            start,
            nominal_start_time,
            nominal_end_time,
            parent_ref,
            root_ref,
            supersedes,
        )
        self._append_build(partition, values_encoder(RunStarted, partition, values))
        ref = RunRef(run_id, namespace, workflow_type, workflow_version, workflow_instance, start, job_path)
        return RunHandle(self, ref, partition, root_ref, has_parent=parent_ref is not None)


class RunHandle:
    """A started run: declares its datasets and ends it, all in the run's partition."""

    def __init__(
        self, writer: EventLogWriter, ref: RunRef, partition: int, root: RunRef | None, *, has_parent: bool
    ) -> None:
        self._writer = writer
        self.ref = ref
        self.partition = partition
        self.root = root
        self.has_parent = has_parent
        self.status: RunStatus | None = None

    @property
    def tree_root(self) -> RunRef | None:
        """The root a child of this run inherits: this run's root, or this run if it is a root."""
        if self.root is not None:
            return self.root
        return None if self.has_parent else self.ref

    @property
    def engine_run_id(self) -> str:
        return self.ref.engine_run_id

    @property
    def ended(self) -> bool:
        return self.status is not None

    def _check_open(self, what: str) -> None:
        if self.status is not None:
            raise ValueError(
                f"{what}: run {self.engine_run_id} already ended with status {self.status.value!r}"
            )

    def _declare(
        self,
        direction: Direction,
        key: str,
        namespace: str,
        name: str,
        version: str | None,
        time: datetime | None,
    ) -> None:
        if self.status is not None:
            self._check_open("dataset_input" if direction is Direction.INPUT else "dataset_output")
        # Inline checks (this is the hot path of bulk writers); the helpers give the messages.
        if type(key) is not str or not key.strip():
            require_text("key", key)
        namespace = checked_namespace("namespace", namespace)
        if type(name) is not str or not name.strip():
            require_text("name", name)
        if version is not None and (type(version) is not str or not version.strip()):
            require_text("version", version)
        writer = self._writer
        append_time = writer._clock()
        # fast for UTC datetimes (none is after the range's end, datetime.max); others: the helper
        if type(append_time) is not datetime or append_time.tzinfo is not UTC or append_time < EARLIEST:
            require_time(_CLOCK_FIELD, append_time)
        if time is None:
            time = append_time
        elif type(time) is not datetime or time.tzinfo is not UTC or time < EARLIEST:
            require_time("time", time)
        run_id = self.ref.engine_run_id
        values = (append_time, run_id, direction, key, namespace, name, version, time)  # _DECLARED_TAIL
        writer._append_build(self.partition, values_encoder(DatasetDeclared, self.partition, values))

    def dataset_input(
        self, key: str, namespace: str, name: str, version: str | None = None, *, time: datetime | None = None
    ) -> None:
        """Declare that the run read the dataset (`namespace`, `name`) at call site `key`."""
        self._declare(Direction.INPUT, key, namespace, name, version, time)

    def dataset_output(
        self, key: str, namespace: str, name: str, version: str | None = None, *, time: datetime | None = None
    ) -> None:
        """Declare that the run wrote the dataset (`namespace`, `name`) at call site `key`."""
        self._declare(Direction.OUTPUT, key, namespace, name, version, time)

    def dataset(self, key: str, namespace: str, name: str) -> Dataset:
        """A Dataset bound to this run, for datasets read or written more than once."""
        return Dataset(key, namespace, name, run=self)

    def run_ended(
        self,
        status: RunStatus | str,
        error: RunError | str | None = None,
        *,
        end_time: datetime | None = None,
    ) -> None:
        """Append the run's RunEnded; a second call raises ValueError."""
        self._check_open("run_ended")
        parsed = parse_status(status)
        if isinstance(error, str):
            error = RunError(message=require_text("error", error))
        elif error is not None:
            require_text("error.message", error.message)
        writer = self._writer
        append_time = writer.now()
        end = require_time("end_time", end_time or append_time)
        values = (append_time, self.engine_run_id, parsed, end, error)  # _ENDED_TAIL
        writer._append_build(self.partition, values_encoder(RunEnded, self.partition, values))
        self.status = parsed


@dataclass(frozen=True, slots=True)
class Dataset:
    """A dataset a run may declare more than once: ``ds.read()`` / ``ds.write()``.

    Bound to a run by ``run.dataset(...)``; an unbound one takes the run as an argument.
    """

    key: str
    namespace: str
    name: str
    run: RunHandle | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        require_text("key", self.key)
        object.__setattr__(self, "namespace", checked_namespace("namespace", self.namespace))
        require_text("name", self.name)

    def _run(self, run: RunHandle | None) -> RunHandle:
        chosen = run or self.run
        if chosen is None:
            raise ValueError(f"dataset {self.namespace}/{self.name} is not bound to a run: pass run=")
        return chosen

    def read(
        self, run: RunHandle | None = None, *, version: str | None = None, time: datetime | None = None
    ) -> None:
        self._run(run).dataset_input(self.key, self.namespace, self.name, version, time=time)

    def write(
        self, run: RunHandle | None = None, *, version: str | None = None, time: datetime | None = None
    ) -> None:
        self._run(run).dataset_output(self.key, self.namespace, self.name, version, time=time)
