"""The run directory kept across restarts: the tail only is read again, the answers do not change, and
a copy of a deleted and recreated records topic is never trusted."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from olstream.contract.records import RunRef
from olstream.shared.errors import InfrastructureError
from olstream.shared.kafka_admin import ensure_topic
from tests.support.stream_records import T0, started
from tests.support.stream_support import consume_all, produce_records, run_until_idle, worker_cmd

pytestmark = pytest.mark.integration

CAUGHT_UP = re.compile(r"run directory: caught up with \S+: (\d+) records read in [\d.]+ s \(([^)]*)\)")


def caught_up(log_path: Path) -> tuple[int, str]:
    """The records the directory read on start, and whether it went on from its data dir."""
    found = CAUGHT_UP.findall(log_path.read_text(errors="replace"))
    assert found, f"no catch-up line in {log_path}"
    read, how = found[-1]
    return int(read), how


def events_of(bootstrap: str, topic: str, expect: int) -> dict[tuple[str, str], bytes]:
    """Each event's bytes by (engine run id, event type)."""
    out: dict[tuple[str, str], bytes] = {}
    for o in consume_all(bootstrap, topic, expect=expect, idle=1.0):
        doc: dict[str, Any] = json.loads(o.value)
        out[(doc["run"]["facets"]["workflow"]["engineRunId"], doc["eventType"])] = o.value
    return out


def parent_of(event: bytes) -> str | None:
    facet = json.loads(event)["run"]["facets"].get("parent")
    return None if facet is None else str(facet["run"]["runId"])


def test_a_restarted_worker_reads_only_the_tail_and_finds_an_old_parent_as_a_fresh_worker_does(
    kafka_bootstrap: str, make_topic: Any, unique_group: str, tmp_path: Path
) -> None:
    src = make_topic(2)
    out, out_fresh, err = make_topic(2), make_topic(2), make_topic(1)
    parent = started("old-parent", partition=1, offset=0, wtype="parent", start=T0)
    # an idle log partition: nothing is appended to it after the restart, and the child's heads name it
    history = [started(f"old-{i}", partition=2, offset=i, start=T0) for i in range(3000)]
    produce_records(kafka_bootstrap, src, [parent, *history])
    data = tmp_path / "kept"
    cmd = worker_cmd(kafka_bootstrap, unique_group, data, src, out, err)
    run_until_idle(cmd, tmp_path / "first.log")
    read, how = caught_up(tmp_path / "first.log")
    assert (read, how) == (3001, "read from the beginning")

    child = started("new-child", partition=0, offset=0, parent=RunRef("old-parent"), start=T0.replace(hour=9))
    produce_records(kafka_bootstrap, src, [child], heads={0: 0, 1: 0, 2: 2999})
    run_until_idle(cmd, tmp_path / "restarted.log")
    read, how = caught_up(tmp_path / "restarted.log")
    assert how == "went on from its data dir"
    assert read <= 1, f"the restarted worker read {read} records of the topic again, not only its tail"

    # a worker that never ran (its own app id and data dir) gives the same bytes
    fresh = worker_cmd(kafka_bootstrap, unique_group + ".fresh", tmp_path / "fresh", src, out_fresh, err)
    run_until_idle(fresh, tmp_path / "fresh.log")
    assert caught_up(tmp_path / "fresh.log") == (3002, "read from the beginning")
    kept_events = events_of(kafka_bootstrap, out, 3002)
    fresh_events = events_of(kafka_bootstrap, out_fresh, 3002)
    parent_run = parent_of(kept_events[("new-child", "START")])
    assert parent_run is not None, "the restarted worker lost the old parent on another log partition"
    assert parent_run == json.loads(kept_events[("old-parent", "START")])["run"]["runId"]
    assert kept_events == fresh_events
    assert consume_all(kafka_bootstrap, err, idle=0.5) == []


def recreate(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    deadline = time.monotonic() + 60
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} was not deleted"
        time.sleep(0.2)
    while True:
        try:
            ensure_topic(bootstrap, topic, partitions)
            return
        except InfrastructureError:  # marked for deletion a moment longer: asked again
            assert time.monotonic() < deadline, f"{topic} could not be created again"
            time.sleep(0.5)


def test_a_directory_kept_from_a_deleted_and_recreated_records_topic_is_rebuilt(
    kafka_bootstrap: str, make_topic: Any, unique_group: str, tmp_path: Path
) -> None:
    src = make_topic(2)
    out, out_new, err = make_topic(2), make_topic(2), make_topic(1)
    parent = started("p", partition=1, offset=0, wtype="parent")
    produce_records(
        kafka_bootstrap, src, [parent, *(started(f"x-{i}", partition=1, offset=i) for i in range(1, 50))]
    )
    data = tmp_path / "kept"
    run_until_idle(worker_cmd(kafka_bootstrap, unique_group, data, src, out, err), tmp_path / "old.log")

    # a new log in a topic of the same name (a new --app-id, as docs/limits.md requires): no run "p"
    # is in it, so the child has no parent; the kept copy holds the old "p" below the child's heads
    recreate(kafka_bootstrap, src, 2)
    child = started("c", partition=0, offset=0, parent=RunRef("p"))
    others = [started(f"y-{i}", partition=1, offset=i) for i in range(60)]
    produce_records(kafka_bootstrap, src, [child, *others], heads={0: 0, 1: 59})
    cmd = worker_cmd(kafka_bootstrap, unique_group + ".new-log", data, src, out_new, err)
    run_until_idle(cmd, tmp_path / "new.log")
    events = events_of(kafka_bootstrap, out_new, 61)
    assert parent_of(events[("c", "START")]) is None, "the child found a parent of the deleted topic"
    log_text = (tmp_path / "new.log").read_text(errors="replace")
    assert "rebuilt from the topic" in log_text, log_text[-3000:]
    assert caught_up(tmp_path / "new.log") == (61, "read from the beginning")
