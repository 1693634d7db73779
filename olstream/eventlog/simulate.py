"""A realistic, reproducible engine workload written through the writer API.

``simulate(store, runs=1000, seed=7)`` writes trees of workflow runs: several workflow types and
versions (see `simulate_catalog`), children up to depth 4 (the root has depth 0; children are
usually on another partition than their parent), 1 to 6 datasets per run, some declared twice,
every end status with error details on failures, re-runs that supersede a run, nominal times
on scheduled workflows, non-ASCII dataset names and some runs left open. Most children carry
their parent's full coordinates and the tree's root; some carry only the parent's
``engine_run_id`` (resolved through the worker's run directory), some a full parent but no root,
and some name a parent that is not in the log at all (started by another engine: no edge).

Everything (ids, times, choices) derives from the seed: the same seed and run count write the
same records. Times start at `base_time` and advance by seeded increments, never the wall clock,
so the span of simulated time does not depend on the base time (`base_time_ending`).
"""

from __future__ import annotations

import bisect
import gc
import itertools
import random
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from olstream.contract.records import RunError, RunRef, RunStatus
from olstream.eventlog import simulate_catalog as cat
from olstream.eventlog.store import EventLogStore
from olstream.eventlog.writer import EventLogWriter, RunHandle

BASE_TIME = datetime(2024, 5, 1, 0, 0, tzinfo=UTC)
MAX_DEPTH = 4
OPEN = "open"
T = TypeVar("T")
NON_ASCII_DATASETS = frozenset(k for k, (ns, name) in cat.DATASETS.items() if not (ns + name).isascii())
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)
STATUS_ORDER = (*(s.value for s in RunStatus), OPEN)


@dataclass(frozen=True, slots=True)
class SimulationSummary:
    """What a simulation wrote."""

    runs: int
    records: int
    partitions: int
    by_status: dict[str, int]
    by_depth: dict[int, int]
    child_runs: int
    children_on_other_partition: int
    children_with_partial_parent: int
    children_without_root: int
    children_with_absent_parent: int
    superseding_runs: int
    scheduled_runs: int
    dataset_declarations: int
    declared_twice: int
    non_ascii_declarations: int
    workflow_types: int
    seconds: float
    first_time: datetime
    last_time: datetime

    @property
    def open_runs(self) -> int:
        return self.by_status.get(OPEN, 0)

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("inf")

    def render(self) -> str:
        """A human-readable report of what was written."""
        lines = [
            f"wrote {self.runs} runs, {self.records} records into {self.partitions} partitions "
            f"in {self.seconds:.2f} s ({self.records_per_second:,.0f} records/s)",
            f"  simulated time: {self.first_time.isoformat()} .. {self.last_time.isoformat()}",
            "  runs by end status: "
            + ", ".join(f"{s}={self.by_status[s]}" for s in STATUS_ORDER if self.by_status.get(s)),
            f"  open runs (no RunEnded): {self.open_runs}",
            "  runs by depth: " + ", ".join(f"{d}={n}" for d, n in sorted(self.by_depth.items())),
            f"  child runs: {self.child_runs} ({self.children_on_other_partition} on another partition "
            f"than their parent, {self.children_with_partial_parent} with only the parent's engine_run_id, "
            f"{self.children_without_root} with no root, {self.children_with_absent_parent} whose parent "
            "is not in the log)",
            f"  superseding runs: {self.superseding_runs}; scheduled runs: {self.scheduled_runs}",
            f"  dataset declarations: {self.dataset_declarations} ({self.declared_twice} repeated, "
            f"{self.non_ascii_declarations} non-ASCII); workflow types: {self.workflow_types}",
        ]
        return "\n".join(lines)


@dataclass
class _Tally:
    by_status: Counter[str] = field(default_factory=Counter)
    by_depth: Counter[int] = field(default_factory=Counter)
    types: set[str] = field(default_factory=set)
    child_runs: int = 0
    other_partition: int = 0
    partial_parent: int = 0
    no_root: int = 0
    absent_parent: int = 0
    superseding: int = 0
    scheduled: int = 0
    declarations: int = 0
    declared_twice: int = 0
    non_ascii: int = 0


class _Simulation:
    def __init__(
        self, store: EventLogStore, runs: int, seed: int, base_time: datetime, batch_size: int
    ) -> None:
        self.rng = random.Random(seed)
        self.now = base_time
        self.writer = EventLogWriter(store, clock=lambda: self.now, batch_size=batch_size)
        self.remaining = runs
        self.tally = _Tally()
        # Forced first picks so even small runs cover every status and both odd parent shapes.
        self.forced_status: list[RunStatus | None] = [*RunStatus, None]
        self.rng.shuffle(self.forced_status)
        self.forced_status.remove(RunStatus.SUPERSEDED)
        self.forced_status.append(RunStatus.SUPERSEDED)  # first: its re-run needs a spare run
        self.forced_parent_modes = ["absent", "partial", "no_root"]
        self.statuses = list(cat.STATUS_WEIGHTS)
        self.status_cumulative = list(itertools.accumulate(cat.STATUS_WEIGHTS.values()))
        self.random = self.rng.random
        self.scheduled_names: dict[tuple[str, datetime], str] = {}
        self.written: dict[str, str] = {}  # dataset key -> the version last written

    def pick(self, seq: Sequence[T]) -> T:
        """A seeded choice (cheaper than Random.choice)."""
        return seq[int(self.random() * len(seq))]

    def sample(self, seq: Sequence[T], k: int) -> list[T]:
        """`k` distinct seeded picks (cheaper than Random.sample for tiny k)."""
        pool = list(seq)
        return [pool.pop(int(self.random() * len(pool))) for _ in range(k)]

    def between(self, low: int, high: int) -> int:
        """A seeded integer in [low, high] (cheaper than Random.randint)."""
        return low + int(self.random() * (high - low + 1))

    def tick(self, low_ms: int = 1, high_ms: int = 4000) -> datetime:
        """Advance the simulated clock by a seeded amount (random() is cheaper than randint())."""
        span = (high_ms - low_ms) * 1000
        self.now += timedelta(0, 0, low_ms * 1000 + int(self.random() * span))
        return self.now

    def new_id(self) -> str:
        h = (self.rng.getrandbits(128) & _UUID4_CLEAR) | _UUID4_SET  # version 4, RFC 4122 variant
        x = f"{h:032x}"
        return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"

    def run(self) -> None:
        first = True
        with self.writer.batch():  # one transaction per `batch_size` records
            while self.remaining > 0:
                root_type = cat.DEEP_CHAIN_ROOT if first else self.pick(cat.ROOT_TYPES)
                self.tick(1000, 90_000)
                self.run_tree(cat.WORKFLOWS[root_type], depth=0, parent=None, root=None, chain=first)
                first = False

    def pick_status(self) -> RunStatus | None:
        if self.forced_status:
            return self.forced_status.pop()
        return self.statuses[
            bisect.bisect(self.status_cumulative, self.random() * self.status_cumulative[-1])
        ]

    def instance_for(self, wf: cat.WorkflowType, parent: RunHandle | None) -> tuple[str, datetime | None]:
        if parent is not None:
            return f"{parent.ref.workflow_instance}/{wf.name}-{self.between(1, 9)}", None
        if wf.schedule_minutes is not None:
            period = timedelta(minutes=wf.schedule_minutes)
            nominal = BASE_TIME + ((self.now - BASE_TIME) // period) * period
            name = self.scheduled_names.get((wf.name, nominal))
            if name is None:
                name = self.scheduled_names[(wf.name, nominal)] = f"{wf.name}@{nominal:%Y-%m-%dT%H:%M}"
            return name, nominal
        return f"{wf.name}-{self.between(1, 400)}", None

    def start(
        self,
        wf: cat.WorkflowType,
        depth: int,
        parent: RunHandle | None,
        root: RunHandle | None,
        instance: str,
        nominal: datetime | None,
        supersedes: str | None = None,
    ) -> RunHandle:
        parent_arg: RunHandle | RunRef | None = parent
        root_arg = root
        if parent is not None:
            mode = self.forced_parent_modes.pop() if self.forced_parent_modes else None
            roll = self.random()
            if mode == "partial" or (mode is None and roll < 0.12):
                parent_arg, root_arg = RunRef(engine_run_id=parent.engine_run_id), None
                self.tally.partial_parent += 1
                self.tally.no_root += 1
            elif mode == "no_root" or (mode is None and roll < 0.18):
                parent_arg, root_arg = parent.ref, None  # full coordinates, no root
                self.tally.no_root += 1
            elif mode == "absent" or (mode is None and roll < 0.20):
                # started by another engine: its parent's id is in no log partition (no seeded draw,
                # so the rest of the workload stays as it was)
                parent_arg, root_arg = RunRef(engine_run_id=f"other-engine/{parent.engine_run_id}"), None
                self.tally.absent_parent += 1
        period = timedelta(minutes=wf.schedule_minutes or 0)
        run = self.writer.run_started(
            namespace=wf.namespace,
            workflow_type=wf.name,
            workflow_version=self.pick(wf.versions),
            workflow_instance=instance,
            task_id=self.pick(cat.TENANTS),
            engine_run_id=self.new_id(),
            principal=wf.principal if self.random() < 0.8 else self.pick((None, *cat.OPERATORS)),
            nominal_start_time=nominal,
            nominal_end_time=None if nominal is None else nominal + period,
            parent=parent_arg,
            root=root_arg.ref if root_arg is not None else None,
            supersedes=supersedes,
        )
        self.remaining -= 1
        t = self.tally
        t.by_depth[depth] += 1
        t.types.add(wf.name)
        t.scheduled += nominal is not None
        t.superseding += supersedes is not None
        if parent is not None:
            t.child_runs += 1
            t.other_partition += run.partition != parent.partition
        return run

    def run_tree(
        self,
        wf: cat.WorkflowType,
        depth: int,
        parent: RunHandle | None,
        root: RunHandle | None,
        chain: bool,
    ) -> None:
        instance, nominal = self.instance_for(wf, parent)
        run = self.start(wf, depth, parent, root, instance, nominal)
        while True:
            status = self.run_body(run, wf, depth, root or run, chain)
            if status is not RunStatus.SUPERSEDED or self.remaining <= 0:
                return
            # A re-run of the same instance supersedes the run just ended.
            self.tick()
            run = self.start(wf, depth, parent, root, instance, nominal, supersedes=run.engine_run_id)
            chain = False

    def run_body(
        self, run: RunHandle, wf: cat.WorkflowType, depth: int, root: RunHandle, chain: bool
    ) -> RunStatus | None:
        count = self.between(1, min(6, len(wf.inputs) + len(wf.outputs)))
        n_out = self.between(max(0, count - len(wf.inputs)), min(count, len(wf.outputs)))
        n_in = count - n_out
        inputs = self.sample(wf.inputs, n_in)
        outputs = self.sample(wf.outputs, n_out)
        for key in inputs:
            self.declare(run, key, output=False)
        if depth < MAX_DEPTH and wf.children:
            roll = self.random()
            n_children = 1 if chain else (0 if roll < 0.5 else 1 if roll < 0.88 else 2)
            for _ in range(n_children):
                if self.remaining <= 0:
                    break
                child = cat.WORKFLOWS[wf.children[0] if chain else self.pick(wf.children)]
                self.tick()
                self.run_tree(child, depth + 1, run, root, chain)
        for key in outputs:
            self.declare(run, key, output=True)
        if self.random() < 0.12:  # the same dataset declared again through a Dataset value
            key = self.pick(inputs + outputs)
            ns, name = cat.DATASETS[key]
            self.tally.declared_twice += 1
            self.count_declaration(key)
            dataset = run.dataset(key, ns, name)
            when = self.tick(1, 500)
            (dataset.write if key in outputs else dataset.read)(
                version=self.version(key, key in outputs), time=when
            )
        status = self.pick_status()
        self.tally.by_status[OPEN if status is None else status.value] += 1
        if status is not None:
            self.tick()
            run.run_ended(status, self.error_for(status, wf, inputs + outputs))
        return status

    def version(self, key: str, output: bool) -> str | None:
        """A written version is new; a read version is the one last written, so the two connect."""
        roll = self.random()
        if output:
            if roll >= 0.4:
                return None
            version = self.written[key] = f"sha256:{self.rng.getrandbits(64):016x}"
            return version
        return self.written.get(key) if roll < 0.5 else None

    def count_declaration(self, key: str) -> None:
        self.tally.declarations += 1
        self.tally.non_ascii += key in NON_ASCII_DATASETS

    def declare(self, run: RunHandle, key: str, *, output: bool) -> None:
        ns, name = cat.DATASETS[key]
        tally = self.tally
        tally.declarations += 1
        tally.non_ascii += key in NON_ASCII_DATASETS
        when = self.tick(1, 2000)
        if output:
            run.dataset_output(key, ns, name, self.version(key, True), time=when)
        else:
            run.dataset_input(key, ns, name, self.version(key, False), time=when)

    def error_for(self, status: RunStatus, wf: cat.WorkflowType, keys: list[str]) -> RunError | None:
        choices = cat.ERRORS.get(status)
        if choices is None or (status is RunStatus.CANCELLED and self.random() < 0.3):
            return None
        error_type, template = self.pick(choices)
        message = template.format(
            dataset=cat.DATASETS[self.pick(keys)][1],
            n=self.between(2, 99),
            operator=self.pick(cat.OPERATORS),
        )
        trace = cat.STACK_TRACE.format(
            n=self.between(10, 500), workflow=wf.name, error_type=error_type, message=message
        )
        return RunError(message=message, type=error_type, stack_trace=trace if self.random() < 0.8 else None)


def simulate(
    store: EventLogStore,
    runs: int,
    seed: int = 0,
    *,
    base_time: datetime = BASE_TIME,
    batch_size: int = 5000,
) -> SimulationSummary:
    """Write a seeded workload of `runs` runs into `store` and return what was written."""
    if runs < 0:
        raise ValueError(f"runs must be >= 0, got {runs}")
    started = time.perf_counter()
    sim = _Simulation(store, runs, seed, base_time, batch_size)
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], 50_000), *thresholds[1:])  # bulk: fewer young-gen passes
    try:
        sim.run()
    finally:
        gc.set_threshold(*thresholds)
    seconds = time.perf_counter() - started
    t = sim.tally
    return SimulationSummary(
        runs=runs,
        records=sim.writer.records_written,
        partitions=sim.writer.partition_count,
        by_status=dict(t.by_status),
        by_depth=dict(t.by_depth),
        child_runs=t.child_runs,
        children_on_other_partition=t.other_partition,
        children_with_partial_parent=t.partial_parent,
        children_without_root=t.no_root,
        children_with_absent_parent=t.absent_parent,
        superseding_runs=t.superseding,
        scheduled_runs=t.scheduled,
        dataset_declarations=t.declarations,
        declared_twice=t.declared_twice,
        non_ascii_declarations=t.non_ascii,
        workflow_types=len(t.types),
        seconds=seconds,
        first_time=base_time,
        last_time=sim.now,
    )


def base_time_ending(end: datetime, runs: int, seed: int = 0, *, partitions: int = 8) -> datetime:
    """The base time at which `simulate(store, runs, seed)` writes its last record at `end`.

    Simulated time advances by seeded increments from the base time, so its span is the same for
    every base time; one dry run at `BASE_TIME` into a scratch SQLite log measures it.
    """
    from olstream.eventlog.sqlite_store import SqliteEventLogStore

    with tempfile.TemporaryDirectory(prefix="olstream-span-") as scratch:
        url = f"sqlite:///{Path(scratch) / 'span.db'}"
        store = SqliteEventLogStore.open(url, partitions=partitions, create=True)
        try:
            dry = simulate(store, runs, seed)
        finally:
            store.close()
    return end - (dry.last_time - dry.first_time)
