"""Pure helpers of `olstream demo`."""

from __future__ import annotations

import json
from pathlib import Path

from olstream.devkit.demo import topics_for
from olstream.devkit.demo_support import FileFollower, OutputTally, metric_total


def test_metric_total_sums_matching_samples_and_ignores_comments_and_created() -> None:
    text = (
        "# HELP olstream_stream_parent_not_visible_total runs emitted without parent\n"
        "# TYPE olstream_stream_parent_not_visible_total counter\n"
        'olstream_stream_parent_not_visible_total{worker="a"} 3.0\n'
        'olstream_stream_parent_not_visible_total{worker="b"} 2.0\n'
        "olstream_stream_parent_not_visible_created 1.7e9\n"
        "olstream_stream_events_total 99.0\n"
    )
    assert metric_total(text, "parent_not_visible") == 5.0
    assert metric_total("", "parent_not_visible") == 0.0


def test_output_tally_counts_distinct_events_and_terminal_runs() -> None:
    tally = OutputTally()
    start = json.dumps({"eventType": "START", "run": {"runId": "r1"}}).encode()
    end = json.dumps({"eventType": "FAIL", "run": {"runId": "r1"}}).encode()
    for raw in (start, end, end):
        tally.add(raw)
    assert len(tally.events) == 2
    assert tally.duplicates == 1
    assert tally.terminal_runs == {"r1"}
    assert tally.conflicting == 0
    tally.add(json.dumps({"eventType": "FAIL", "run": {"runId": "r1"}, "inputs": []}).encode())
    assert tally.conflicting == 1


def test_file_follower_returns_only_complete_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    follower = FileFollower(path)
    assert follower.new_lines() == []
    path.write_bytes(b'{"a":1}\n{"b"')
    assert follower.new_lines() == [b'{"a":1}']
    with path.open("ab") as f:
        f.write(b":2}\n")
    assert follower.new_lines() == [b'{"b":2}']
    assert follower.new_lines() == []


def test_topics_are_default_on_an_own_broker_and_unique_on_a_shared_one() -> None:
    own = topics_for(True, "abc")
    assert (own.eventlog, own.events) == ("olstream.eventlog", "openlineage.events")
    shared = topics_for(False, "abc")
    assert shared.eventlog.endswith("demo-abc") and shared.events.endswith("demo-abc")
    assert shared.sink_group != own.sink_group


def test_running_events_of_a_run_are_told_apart_by_the_dataset_and_its_side() -> None:
    """A run that reads and writes the same dataset has two RUNNING events: neither differs from the other."""
    tally = OutputTally()
    base = {"eventType": "RUNNING", "run": {"runId": "r1"}, "job": {"namespace": "n", "name": "j"}}
    ds = [{"namespace": "s3://b", "name": "t"}]
    tally.add(json.dumps({**base, "inputs": ds, "outputs": []}).encode())
    tally.add(json.dumps({**base, "inputs": [], "outputs": ds}).encode())
    assert tally.running == 2 and tally.conflicting == 0
    tally.add(json.dumps({**base, "eventTime": "other", "inputs": ds, "outputs": []}).encode())
    assert tally.conflicting == 1  # the same RUNNING event with other bytes


def test_demo_base_time_defaults_to_now_and_takes_an_explicit_time() -> None:
    """No --base-time: the demo dates its workload to end now; --base-time keeps a run reproducible."""
    from datetime import UTC, datetime

    from olstream.devkit.demo import demo_settings
    from olstream.devkit.settings import DEMO
    from olstream.shared.config import resolve

    assert demo_settings(resolve("demo", DEMO, {}, {}).values).base_time is None
    flags = {"base_time": "2024-05-01T00:00:00+00:00"}
    assert demo_settings(resolve("demo", DEMO, flags, {}).values).base_time == datetime(
        2024, 5, 1, tzinfo=UTC
    )
