"""Record builders shared by the stream unit tests."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

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
from olstream.streams.mapping import MappingConfig
from olstream.streams.processor import Output, Step, apply
from olstream.streams.state import RunState, state_key

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


class Harness:
    """A dict standing in for the worker's table."""

    def __init__(self, cfg: MappingConfig | None = None) -> None:
        self.cfg = cfg or MappingConfig()
        self.table: dict[str, RunState] = {}
        self.steps: list[Step] = []

    def feed(self, *records: Record) -> list[Output]:
        outs: list[Output] = []
        for r in records:
            step = apply(r, self.cfg, self.table.get, home=0)
            self.steps.append(step)
            if step.write is not None:
                self.table[step.key] = step.write
            outs.extend(step.outputs)
        return outs

    def state(self, engine_run_id: str, log_partition: int = 0) -> RunState:
        """The stored state of a run (`state_key`)."""
        return self.table[state_key(log_partition, engine_run_id)]


def doc(o: Output) -> dict[str, Any]:
    return json.loads(o.value)  # type: ignore[no-any-return]


def path_ref(r: RunStarted, path: str) -> RunRef:
    """The reference the writer API puts on a child of `r`: full coordinates and `r`'s job path."""
    return replace(ref_of(r), job_name=path)


def chain(depth: int, partition_step: int = 1) -> list[RunStarted]:
    """A chain root -> ... of `depth` runs, each on another log partition, as the writer writes it."""
    runs: list[RunStarted] = []
    path = ""
    for i in range(depth):
        parent = runs[-1] if runs else None
        runs.append(
            started(
                f"r{i}",
                wtype=f"t{i}",
                version=str(i),
                instance=f"i{i}",
                partition=i * partition_step,
                parent=None if parent is None else path_ref(parent, path),
                root=None if parent is None else path_ref(runs[0], "t0@0"),
            )
        )
        path = f"{path}.t{i}@{i}" if path else f"t{i}@{i}"
    return runs
