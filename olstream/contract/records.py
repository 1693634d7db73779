"""The engine's durable records as frozen values (the Python side of `avro/`).

Times are timezone-aware UTC datetimes with microsecond precision, as Avro's
``timestamp-micros`` carries them, from 1970-01-01T00:00:00Z to datetime's maximum: `times`
lists every time field and checks them. `to_avro_dict`/`from_avro_dict` are the records as the
dicts fastavro writes and reads (`codec` re-exports them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class Direction(StrEnum):
    INPUT = "INPUT"
    OUTPUT = "OUTPUT"


class RunStatus(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    RETRIES_EXHAUSTED = "retries_exhausted"
    POISON = "poison"
    SKIPPED_TO_DLQ = "skipped_to_dlq"
    QUARANTINED = "quarantined"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class RunRef:
    """Another run's coordinates (a parent or a root); only ``engine_run_id`` is always known."""

    engine_run_id: str
    namespace: str | None = None
    workflow_type: str | None = None
    workflow_version: str | None = None
    workflow_instance: str | None = None
    start_time: datetime | None = None
    job_name: str | None = None  # the run's job path from its tree's root (`naming`), when known

    @property
    def is_complete(self) -> bool:
        """True when the coordinates are enough to derive the run's OpenLineage identity."""
        return None not in (
            self.namespace,
            self.workflow_type,
            self.workflow_version,
            self.workflow_instance,
            self.start_time,
        )


@dataclass(frozen=True, slots=True)
class RunError:
    message: str
    type: str | None = None
    stack_trace: str | None = None


@dataclass(frozen=True, slots=True)
class RunStarted:
    partition: int
    offset: int
    append_time: datetime
    engine_run_id: str
    task_id: str
    namespace: str
    workflow_type: str
    workflow_version: str
    workflow_instance: str
    start_time: datetime
    principal: str | None = None
    nominal_start_time: datetime | None = None
    nominal_end_time: datetime | None = None
    parent: RunRef | None = None
    root: RunRef | None = None
    supersedes: str | None = None


@dataclass(frozen=True, slots=True)
class DatasetDeclared:
    partition: int
    offset: int
    append_time: datetime
    engine_run_id: str
    direction: Direction
    key: str
    dataset_namespace: str
    dataset_name: str
    time: datetime
    version: str | None = None


@dataclass(frozen=True, slots=True)
class RunEnded:
    partition: int
    offset: int
    append_time: datetime
    engine_run_id: str
    status: RunStatus
    end_time: datetime
    error: RunError | None = None


Record = RunStarted | DatasetDeclared | RunEnded

RECORD_TYPES: dict[str, type[RunStarted] | type[DatasetDeclared] | type[RunEnded]] = {
    "RunStarted": RunStarted,
    "DatasetDeclared": DatasetDeclared,
    "RunEnded": RunEnded,
}


def _ref_to_avro(ref: RunRef | None) -> dict[str, Any] | None:
    if ref is None:
        return None
    return {
        "engine_run_id": ref.engine_run_id,
        "namespace": ref.namespace,
        "workflow_type": ref.workflow_type,
        "workflow_version": ref.workflow_version,
        "workflow_instance": ref.workflow_instance,
        "start_time": ref.start_time,
        "job_name": ref.job_name,
    }


def _ref_from_avro(d: dict[str, Any] | None) -> RunRef | None:
    if d is None:
        return None
    return RunRef(
        engine_run_id=d["engine_run_id"],
        namespace=d.get("namespace"),
        workflow_type=d.get("workflow_type"),
        workflow_version=d.get("workflow_version"),
        workflow_instance=d.get("workflow_instance"),
        start_time=d.get("start_time"),
        job_name=d.get("job_name"),
    )


def to_avro_dict(record: Record) -> dict[str, Any]:
    """The record as the dict fastavro writes."""
    if isinstance(record, RunStarted):
        return {
            "partition": record.partition,
            "offset": record.offset,
            "append_time": record.append_time,
            "engine_run_id": record.engine_run_id,
            "task_id": record.task_id,
            "namespace": record.namespace,
            "workflow_type": record.workflow_type,
            "workflow_version": record.workflow_version,
            "workflow_instance": record.workflow_instance,
            "principal": record.principal,
            "start_time": record.start_time,
            "nominal_start_time": record.nominal_start_time,
            "nominal_end_time": record.nominal_end_time,
            "parent": _ref_to_avro(record.parent),
            "root": _ref_to_avro(record.root),
            "supersedes": record.supersedes,
        }
    if isinstance(record, DatasetDeclared):
        return {
            "partition": record.partition,
            "offset": record.offset,
            "append_time": record.append_time,
            "engine_run_id": record.engine_run_id,
            "direction": record.direction.value,
            "key": record.key,
            "dataset_namespace": record.dataset_namespace,
            "dataset_name": record.dataset_name,
            "version": record.version,
            "time": record.time,
        }
    error = record.error
    return {
        "partition": record.partition,
        "offset": record.offset,
        "append_time": record.append_time,
        "engine_run_id": record.engine_run_id,
        "status": record.status.value,
        "end_time": record.end_time,
        "error": None
        if error is None
        else {"message": error.message, "type": error.type, "stack_trace": error.stack_trace},
    }


def from_avro_dict(record_name: str, d: dict[str, Any]) -> Record:
    """The frozen record for a dict fastavro read."""
    if record_name == "RunStarted":
        return RunStarted(
            partition=d["partition"],
            offset=d["offset"],
            append_time=d["append_time"],
            engine_run_id=d["engine_run_id"],
            task_id=d["task_id"],
            namespace=d["namespace"],
            workflow_type=d["workflow_type"],
            workflow_version=d["workflow_version"],
            workflow_instance=d["workflow_instance"],
            start_time=d["start_time"],
            principal=d.get("principal"),
            nominal_start_time=d.get("nominal_start_time"),
            nominal_end_time=d.get("nominal_end_time"),
            parent=_ref_from_avro(d.get("parent")),
            root=_ref_from_avro(d.get("root")),
            supersedes=d.get("supersedes"),
        )
    if record_name == "DatasetDeclared":
        return DatasetDeclared(
            partition=d["partition"],
            offset=d["offset"],
            append_time=d["append_time"],
            engine_run_id=d["engine_run_id"],
            direction=Direction(d["direction"]),
            key=d["key"],
            dataset_namespace=d["dataset_namespace"],
            dataset_name=d["dataset_name"],
            version=d.get("version"),
            time=d["time"],
        )
    err = d.get("error")
    return RunEnded(
        partition=d["partition"],
        offset=d["offset"],
        append_time=d["append_time"],
        engine_run_id=d["engine_run_id"],
        status=RunStatus(d["status"]),
        end_time=d["end_time"],
        error=None if err is None else RunError(err["message"], err.get("type"), err.get("stack_trace")),
    )
