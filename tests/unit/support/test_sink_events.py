"""The sink benchmark's skewed workload (make_run_trees) and the per-run order check (run_order)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from datetime import datetime

from tests.support.openlineage_schema import validator
from tests.support.sink_events import HEADER_RUN_ID, make_run_trees, run_order, zipf_weights


def test_zipf_weights_sum_to_one_and_fall_by_rank() -> None:
    w = zipf_weights(20, 1.2)
    assert abs(sum(w) - 1) < 1e-9
    assert all(a > b for a, b in itertools.pairwise(w))
    assert abs(w[0] / w[1] - 2**1.2) < 1e-9


def test_run_trees_start_then_complete_per_run_same_key_and_header() -> None:
    events = make_run_trees(300, roots=20, exponent=1.2, seed=3)
    assert len(events) == 600
    per_run: dict[str, list[tuple[str, bytes, datetime]]] = {}
    for e in events:
        doc = json.loads(e.value)
        rid = doc["run"]["runId"]
        assert e.headers[0] == (HEADER_RUN_ID, rid.encode("ascii"))
        assert HEADER_RUN_ID == "olstream.run_id"
        assert dict(e.headers) == {
            "olstream.run_id": rid.encode("ascii"),
            "olstream.event_type": doc["eventType"].encode(),
            "olstream.event_time": doc["eventTime"].encode(),
            "olstream.job_namespace": doc["job"]["namespace"].encode(),
            "olstream.job_name": doc["job"]["name"].encode(),
        }
        stamp = datetime.fromisoformat(doc["eventTime"].replace("Z", "+00:00"))
        per_run.setdefault(rid, []).append((doc["eventType"], e.key, stamp))
        job = doc["job"]["name"]
        parent = doc["run"]["facets"].get("parent")
        root_job = job if parent is None else parent["root"]["job"]["name"]
        assert e.key == f"run:sinkbench/{root_job}".encode()  # the tree's root job, as the worker keys
        if parent is not None:
            assert job.startswith(root_job + ".")
            assert parent["run"]["runId"] == parent["root"]["run"]["runId"]
    assert len(per_run) == 300
    for seq in per_run.values():
        assert [k for k, _, _ in seq] == ["START", "COMPLETE"]
        assert seq[0][1] == seq[1][1] and seq[0][2] < seq[1][2]
    stamps = [json.loads(e.value)["eventTime"] for e in events]
    assert stamps == sorted(stamps)  # one timeline: runs overlap


def test_run_trees_are_seeded_and_skewed() -> None:
    a = make_run_trees(1500, seed=7)
    assert a == make_run_trees(1500, seed=7)
    assert a != make_run_trees(1500, seed=8)
    keys = Counter(e.key for e in a).most_common()
    assert 15 <= len(keys) <= 20
    assert keys[0][0] == b"run:sinkbench/flow_00@1"
    assert keys[0][1] > 0.2 * len(a) and keys[0][1] > 1.5 * keys[1][1]


def test_run_trees_are_valid_run_events() -> None:
    v = validator()  # skips without the vendored spec
    for e in make_run_trees(60, seed=1):
        v.validate(e.value)


def test_run_order_counts_violations_missing_and_repeats() -> None:
    ok = run_order([("a", "START"), ("b", "START"), ("b", "COMPLETE"), ("a", "FAIL")])
    assert (ok.runs, ok.out_of_order, ok.incomplete, ok.duplicates, ok.early) == (2, 0, 0, 0, 0)
    bad = run_order([("a", "COMPLETE"), ("a", "START"), ("b", "START"), ("c", "COMPLETE")])
    assert (bad.runs, bad.out_of_order, bad.incomplete, bad.duplicates) == (3, 2, 2, 0)


def test_run_order_early_when_the_terminal_event_came_before_the_start_was_answered() -> None:
    timed = run_order(
        [
            ("a", "START", 1.0, 1.01),
            ("b", "START", 1.0, 1.01),
            ("a", "COMPLETE", 1.005, 1.015),  # a's START not answered yet: early
            ("b", "COMPLETE", 1.02, 1.03),  # after b's answer: fine
            ("c", "START", 2.0, 2.01),  # c's events in one batch request, in order: fine
            ("c", "COMPLETE", 2.0, 2.01),
        ]
    )
    assert (timed.runs, timed.out_of_order, timed.early) == (3, 0, 1)
    # a replayed START after the COMPLETE is a repeat, not a violation (the first START came first)
    replay = run_order([("a", "START"), ("a", "COMPLETE"), ("a", "START")])
    assert (replay.out_of_order, replay.duplicates) == (0, 1)
