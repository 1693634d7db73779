"""Record builders shared by the stream unit tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from connectors.eventlog.records import (
    DatasetDeclared,
    Direction,
    RunEnded,
    RunError,
    RunRef,
    RunStarted,
    RunStatus,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


def started(
    rid: str = "r1",
    *,
    offset: int = 0,
    partition: int = 0,
    namespace: str = "acme",
    wtype: str = "ingest",
    version: str = "3",
    instance: str = "ingest-2026-01-02",
    parent: RunRef | None = None,
    root: RunRef | None = None,
    principal: str | None = "alice",
    nominal: bool = False,
    start: datetime = T0,
    supersedes: str | None = None,
) -> RunStarted:
    return RunStarted(
        partition=partition,
        offset=offset,
        append_time=start,
        engine_run_id=rid,
        task_id="tenant-7",
        namespace=namespace,
        workflow_type=wtype,
        workflow_version=version,
        workflow_instance=instance,
        start_time=start,
        principal=principal,
        nominal_start_time=T0.replace(minute=0, second=0, microsecond=0) if nominal else None,
        nominal_end_time=T0.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        if nominal
        else None,
        parent=parent,
        root=root,
        supersedes=supersedes,
    )


def declared(
    rid: str = "r1",
    *,
    offset: int = 1,
    partition: int = 0,
    direction: Direction = Direction.INPUT,
    ns: str = "postgres://db:5432",
    name: str = "shop.public.orders",
    version: str | None = None,
    at: datetime | None = None,
) -> DatasetDeclared:
    t = at or T0 + timedelta(seconds=offset)
    return DatasetDeclared(
        partition=partition,
        offset=offset,
        append_time=t,
        engine_run_id=rid,
        direction=direction,
        key=f"{direction.value.lower()}-{name}",
        dataset_namespace=ns,
        dataset_name=name,
        time=t,
        version=version,
    )


def ended(
    rid: str = "r1",
    *,
    offset: int = 9,
    partition: int = 0,
    status: RunStatus = RunStatus.COMPLETED,
    error: RunError | None = None,
    at: datetime | None = None,
) -> RunEnded:
    t = at or T0 + timedelta(seconds=60)
    return RunEnded(
        partition=partition,
        offset=offset,
        append_time=t,
        engine_run_id=rid,
        status=status,
        end_time=t,
        error=error,
    )


def ref_of(r: RunStarted) -> RunRef:
    return RunRef(
        r.engine_run_id, r.namespace, r.workflow_type, r.workflow_version, r.workflow_instance, r.start_time
    )
