"""The engine's durable records as frozen values (the Python side of `avro/`).

Times are timezone-aware UTC datetimes with microsecond precision, as Avro's
``timestamp-micros`` carries them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


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
