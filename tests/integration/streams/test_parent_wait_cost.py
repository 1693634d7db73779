"""What a waiting child costs its worker (docs/worker.md, "While a child waits"): the agent is one
sequential loop, so a child waiting for a log partition the source is behind on holds every input
partition of its worker, not only the records behind it in its own; and the wait ends as soon as the
source has published that log partition up to the child's heads."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from olstream.contract.records import Record, RunRef
from olstream.devkit.process import free_port
from tests.support.stream_records import ended, started
from tests.support.stream_support import (
    Follower,
    metric,
    produce_records,
    start_worker,
    stop,
    wait_for,
    worker_cmd,
)

pytestmark = pytest.mark.integration

HELD_SECONDS = 6.0  # how long the test keeps the child's parent's log partition behind
OTHER_RUNS = 20


def engine_run_ids(follower: Follower) -> set[str]:
    return {json.loads(o.value)["run"]["facets"]["workflow"]["engineRunId"] for o in follower.seen}


def test_a_child_waiting_for_a_log_partition_far_behind_holds_every_input_partition_of_its_worker(
    kafka_bootstrap: str, make_topic: Any, unique_group: str, tmp_path: Path
) -> None:
    src, out, err = make_topic(3), make_topic(3), make_topic(1)
    # log partition 1 as the source has published it so far: offsets 0-2 of 0-9
    lagging = [started(f"early-{i}", partition=1, offset=i) for i in range(3)]
    produce_records(kafka_bootstrap, src, lagging)
    # the child was read when log partition 1 held offsets up to 9 (its parent at 9)
    child = started("child", partition=0, offset=0, parent=RunRef("parent"))
    produce_records(kafka_bootstrap, src, [child], heads={0: 0, 1: 9})

    port = free_port()
    log = tmp_path / "worker.log"
    cmd = worker_cmd(kafka_bootstrap, unique_group, tmp_path / "data", src, out, err)
    worker = start_worker([*cmd, "--metrics-port", str(port)], log)
    follower = Follower(kafka_bootstrap, out)
    try:
        wait_for("the child waiting", lambda: metric(port, "olstream_stream_children_waiting") == 1, 90, log)
        # whole runs on another log partition (another input partition of the same worker)
        others: list[Record] = [started(f"other-{i}", partition=2, offset=2 * i) for i in range(OTHER_RUNS)]
        others += [ended(f"other-{i}", partition=2, offset=2 * i + 1) for i in range(OTHER_RUNS)]
        produce_records(kafka_bootstrap, src, others)
        appended = time.monotonic()
        while time.monotonic() - appended < HELD_SECONDS:
            follower.poll(0.2)
        held = {r for r in engine_run_ids(follower) if r.startswith("other-")}
        assert held == set(), f"runs of another input partition were processed while the child waited: {held}"
        assert metric(port, "olstream_stream_children_waiting") == 1

        # the source catches up on log partition 1: the parent, and what lay before it
        rest = [started(f"late-{i}", partition=1, offset=i) for i in range(3, 9)]
        produce_records(
            kafka_bootstrap, src, [*rest, started("parent", partition=1, offset=9, wtype="parent")]
        )
        published = time.monotonic()
        wanted = {f"other-{i}" for i in range(OTHER_RUNS)} | {"child", "parent"}

        def everything_out() -> bool:
            follower.poll(0.2)
            return wanted <= engine_run_ids(follower)

        wait_for("every run's events", everything_out, 60, log)
        done = time.monotonic()
    finally:
        follower.close()
        stop(worker)
    print(
        f"runs of another input partition waited {done - appended:.1f} s: the {HELD_SECONDS:.0f} s the "
        f"child's log partition stayed behind, then {done - published:.1f} s after the source caught up"
    )
    assert done - published <= 15.0, "the waiting child was not released soon after the source caught up"
    events = {(json.loads(o.value)["run"]["facets"]["workflow"]["engineRunId"]): o for o in follower.seen}
    parent_facet = json.loads(events["child"].value)["run"]["facets"].get("parent")
    assert parent_facet is not None, "the child lost its parent edge"
