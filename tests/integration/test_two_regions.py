"""Two regions, each a pipeline over its own cluster, region B's input a MirrorMaker 2 copy of A's.

Both regions emit the same set of event bytes, whatever their worker counts or the partition count
of B's copy; no run gets a START after its terminal event anywhere, including when MirrorMaker 2 is
killed with kill -9 and, restarted, copies a stretch again; both outputs pass the conformance checks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from olstream.devkit import mirror
from olstream.devkit.demo_support import count_log, parent_edges
from olstream.devkit.mirror_config import MirrorSettings, remote_topic
from olstream.streams.mapping import TERMINAL_EVENT_TYPES
from tests.support.marquez_rules import MarquezRules, misplaced_runs
from tests.support.openlineage_schema import validator
from tests.support.pipeline_support import GrowingLog, LocalCluster, dump_tasks, local_cluster
from tests.support.receiver import Request
from tests.support.stop_support import committed_everything
from tests.support.stream_support import (
    OLSTREAM,
    Out,
    consume_all,
    env,
    repeats,
    start_worker,
    stop,
    tail,
    worker_cmd,
)

pytestmark = pytest.mark.integration

RUNS = 400
TERMINAL = set(TERMINAL_EVENT_TYPES.values())


@contextmanager
def regions(tmp_path: Path) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    with local_cluster(tmp_path / "kafka-a") as a, local_cluster(tmp_path / "kafka-b") as b:
        yield a, b


@contextmanager
def mirrored(
    a: LocalCluster, b: LocalCluster, topic: str, data_dir: Path, flush_ms: int
) -> Iterator[MirrorSettings]:
    settings = MirrorSettings(
        source_bootstrap=a.bootstrap, target_bootstrap=b.bootstrap, data_dir=data_dir,
        topics=topic.replace(".", "\\."), refresh_interval=2, offset_flush_interval_ms=flush_ms,
    )  # fmt: skip
    mirror.start_mirror(settings)
    try:
        yield settings
    finally:
        mirror.stop_mirror(data_dir)


def publish(log: GrowingLog, bootstrap: str, topic: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [*OLSTREAM, "source", "--log", log.url, "--bootstrap", bootstrap, "--topic", topic, "--until-idle",
         "--idle-seconds", "0.5"],
        env=env(), capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex}"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        c.close()


def wait_for(what: str, check: object, timeout: float, region: Region | None = None) -> None:
    """Wait until `check()`; on timeout, the region's workers dump their tasks and their logs are shown."""
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            logs: Sequence[Path] = []
            if region is not None:
                dump_tasks(region.procs)
                logs = region.logs
            shown = "\n".join(f"--- {p.name}\n{tail(p, 20)}" for p in logs)
            raise AssertionError(f"{what} within {timeout:.0f} s:\n{shown}")
        time.sleep(1.0)


class Region:
    """A region's workers: one group reading `input_topic` of its cluster."""

    def __init__(self, name: str, cluster: LocalCluster, input_topic: str, workers: int, tmp: Path) -> None:
        self.name, self.cluster, self.input = name, cluster, input_topic
        self.output, self.errors, self.group = f"{name}.events", f"{name}.errors", f"{name}-workers"
        self.logs = [tmp / f"{name}-w{i}.log" for i in range(workers)]
        self.cmds = [
            worker_cmd(cluster.bootstrap, self.group, tmp / f"{name}-w{i}", input_topic, self.output,
                       self.errors, "--session-timeout", "6")
            for i in range(workers)
        ]  # fmt: skip
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        self.procs = [start_worker(cmd, log) for cmd, log in zip(self.cmds, self.logs, strict=True)]

    def stop(self) -> None:
        for p in self.procs:
            stop(p)

    def caught_up(self) -> bool:
        for p, log in zip(self.procs, self.logs, strict=True):
            assert p.poll() is None, f"{log.name} exited {p.returncode}:\n{tail(log)}"
        return committed_everything(self.cluster.bootstrap, self.group, self.input)

    def events(self) -> list[Out]:
        return sorted(
            consume_all(self.cluster.bootstrap, self.output, idle=1.0), key=lambda o: (o.partition, o.offset)
        )


def starts_after_terminal(events: Sequence[Out]) -> list[str]:
    """Runs whose START follows one of their terminal events in their partition's order."""
    ended: set[str] = set()
    reopened = []
    for o in events:
        doc = o.doc
        run = doc["run"]["runId"]
        if doc["eventType"] in TERMINAL:
            ended.add(run)
        elif doc["eventType"] == "START" and run in ended:
            reopened.append(run)
    return reopened


def conformance(events: Sequence[Out]) -> None:
    """Every event against the OpenLineage schemas, and all of them through Marquez's rules."""
    check = validator()
    rules = MarquezRules()
    for o in events:
        check.validate(o.value)
        rules(Request("POST", "/api/v1/lineage", {}, o.value, 0.0, None), 0)
    model = rules.snapshot()
    assert model.rejections == [], [(r.status, r.reason) for r in model.rejections[:3]]
    assert misplaced_runs(model, [o.doc for o in events]) == []


def compare(a: Sequence[Out], b: Sequence[Out]) -> None:
    assert {o.value for o in a} == {o.value for o in b}, "the regions emitted different events"
    partitions: dict[bytes, set[tuple[str, int]]] = defaultdict(set)
    for region, events in (("A", a), ("B", b)):
        for o in events:
            partitions[o.value].add((region, o.partition))
    moved = [v for v, where in partitions.items() if len({p for _, p in where}) > 1]
    assert not moved, f"{len(moved)} events on other output partitions in the two regions"
    for events in (a, b):
        assert starts_after_terminal(events) == []
        assert repeats(o.value for o in events) == 0, (
            "exactly_once: a read_committed reader sees each event once"
        )
        conformance(events)


def test_two_regions_emit_the_same_events_with_another_partition_count_in_b(tmp_path: Path) -> None:
    topic = f"r{uuid.uuid4().hex[:6]}.eventlog"
    copy = remote_topic("default", "A", topic)
    log = GrowingLog(tmp_path / "events.db")
    log.append(RUNS)
    with regions(tmp_path) as (a, b), ExitStack() as stack:
        # B's copy made beforehand with 9 partitions (A's has 6): MirrorMaker 2 keeps each record's number
        admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept: a destroyed client fails the call
        admin.create_topics([NewTopic(copy, 9, 1)])[copy].result(30)
        publish(log, a.bootstrap, topic, tmp_path)
        stack.enter_context(mirrored(a, b, topic, tmp_path / "mm2", flush_ms=1000))
        region_a = Region("a", a, topic, 1, tmp_path)
        region_b = Region("b", b, copy, 3, tmp_path)
        for region in (region_a, region_b):
            region.start()
            stack.callback(region.stop)
        total = sum(end_offsets(a.bootstrap, topic).values())
        wait_for("B's copy complete", lambda: sum(end_offsets(b.bootstrap, copy).values()) >= total, 120)
        for region in (region_a, region_b):
            wait_for(f"region {region.name} caught up", region.caught_up, 180, region)
        events_a, events_b = region_a.events(), region_b.events()
    assert len(events_a) > 0
    compare(events_a, events_b)
    # every child whose parent is in the log carries its edge, wherever the parent is (run directory)
    counts = count_log(log.url)
    with_edge, _ = parent_edges([o.doc for o in events_a])
    assert counts.children_with_parent and counts.children_parent_absent
    assert sorted(counts.children_with_parent - with_edge) == []
    print(f"{len(events_a)} events in A (1 worker), {len(events_b)} in B (3 workers, a 9-partition copy)")


def test_mirror_maker_killed_and_restarted_copies_again_and_reopens_no_run(tmp_path: Path) -> None:
    topic = f"r{uuid.uuid4().hex[:6]}.eventlog"
    copy = remote_topic("default", "A", topic)
    log = GrowingLog(tmp_path / "events.db")
    log.append(RUNS)
    with regions(tmp_path) as (a, b), ExitStack() as stack:
        publish(log, a.bootstrap, topic, tmp_path)
        # MirrorMaker 2 commits its position only every 10 minutes
        settings = stack.enter_context(mirrored(a, b, topic, tmp_path / "mm2", flush_ms=600_000))
        region_a = Region("a", a, topic, 1, tmp_path)
        region_b = Region("b", b, copy, 2, tmp_path)
        for region in (region_a, region_b):
            region.start()
            stack.callback(region.stop)
        # a second day of runs: record time moves a day on, so the first day's finished runs are evicted
        log.append(RUNS)
        publish(log, a.bootstrap, topic, tmp_path)
        total = sum(end_offsets(a.bootstrap, topic).values())
        wait_for("B's copy complete", lambda: sum(end_offsets(b.bootstrap, copy).values()) >= total, 120)
        wait_for("region b caught up", region_b.caught_up, 180, region_b)
        before = len(region_b.events())
        state = mirror.read_state(settings.data_dir)
        assert state is not None
        os.kill(state.pid, signal.SIGKILL)
        # MirrorMaker 2 copies again what it copied since its last commit. Its commits are timed
        # (here every 10 minutes), so losing its position is what makes this deterministic: the worst
        # case, a kill before its first commit, copies the whole input again at new offsets.
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.delete_topics(["mm2-offsets.A.internal"])["mm2-offsets.A.internal"].result(30)
        mirror.start_mirror(settings)
        wait_for(
            "MirrorMaker 2 copied the stretch again",
            lambda: sum(end_offsets(b.bootstrap, copy).values()) >= 2 * total, 180,
        )  # fmt: skip
        for region in (region_a, region_b):
            wait_for(f"region {region.name} caught up", region.caught_up, 180, region)
        events_a, events_b = region_a.events(), region_b.events()
        copied = sum(end_offsets(b.bootstrap, copy).values())
    assert copied >= 2 * total, (copied, total)
    assert len(events_b) == before, "the copied stretch made region B emit again"
    compare(events_a, events_b)
    print(f"B's copy: {copied} records for A's {total}; events: {len(events_a)} in A, {len(events_b)} in B")
