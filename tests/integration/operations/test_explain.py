"""`olstream explain` against a real broker, a real worker and a real sink: a run that was delivered
(its events shown, the sink group committed past them), a run whose events the receiver refused (its
events found in the sink's DLQ through their payload's run id), a workflow instance's runs, an open
run, and the one-line answers to an unknown run, a missing topic and bad usage. No group's offsets
move."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from olstream.contract.records import Record
from tests.support.receiver import Receiver, Reply, Request
from tests.support.sink_harness import run_sink
from tests.support.stop_support import committed_offsets
from tests.support.stream_records import declared, ended, started
from tests.support.stream_support import produce_records, run_until_idle, worker_cmd

pytestmark = pytest.mark.integration

MakeTopic = Callable[..., str]


def explain(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "olstream", "explain", *args, "--bootstrap", bootstrap],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def report(bootstrap: str, *args: str) -> dict[str, Any]:
    done = explain(bootstrap, *args, "--json")
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _records() -> list[Record]:
    """Log partition 0: `ok-1` (delivered), `open-1` (started only); log partition 1: `bad-1`, whose
    events the receiver refuses. `ok-1` and `open-1` share a workflow instance."""
    return [
        started("ok-1", partition=0, offset=0, instance="daily-2026-01-02", wtype="ingest"),
        declared("ok-1", partition=0, offset=1, name="shop.public.orders"),
        ended("ok-1", partition=0, offset=2),
        started("open-1", partition=0, offset=3, instance="daily-2026-01-02", wtype="ingest"),
        started("bad-1", partition=1, offset=0, instance="hourly-7", wtype="export"),
        declared("bad-1", partition=1, offset=1, name="shop.public.refunds"),
        ended("bad-1", partition=1, offset=2),
    ]


def test_explain_follows_a_delivered_run_and_a_dead_lettered_one_without_moving_a_group(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    records, events, errors = make_topic(2), make_topic(2), make_topic(1)
    dlq = f"{events}.dlq"
    app_id, sink_group = f"{unique_group}-w", f"{unique_group}-s"
    produce_records(kafka_bootstrap, records, _records())
    run_until_idle(
        worker_cmd(kafka_bootstrap, app_id, tmp_path / "data", records, events, errors), tmp_path / "w.log"
    )

    def refuse_bad(request: Request, n: int) -> Reply:
        return Reply(400, b'{"error":"refused"}') if b'"engineRunId":"bad-1"' in request.body else Reply(201)

    with Receiver() as receiver:
        receiver.respond_with(refuse_bad)
        rc = run_sink(kafka_bootstrap, events, sink_group, "--url", receiver.url, "--dlq-topic", dlq,
                      log_path=tmp_path / "sink.log")  # fmt: skip
        assert rc == 0, (tmp_path / "sink.log").read_text()[-3000:]

    topics = ("--records-topic", records, "--events-topic", events, "--dlq-topic", dlq, "--app-id", app_id)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    groups_before = {g.group_id for g in admin.list_consumer_groups().result().valid}
    sink_before = committed_offsets(kafka_bootstrap, sink_group, events)
    worker_before = committed_offsets(kafka_bootstrap, app_id, records)

    # a delivered run, by its engine run id
    ok = report(kafka_bootstrap, "ok-1", *topics)
    assert ok["found_as"] == "engine run id"
    [run] = ok["runs"]
    assert (run["engine_run_id"], run["log_partition"]) == ("ok-1", 0)
    assert [(r["type"], r["log_offset"]) for r in run["records"]] == [
        ("RunStarted", 0), ("DatasetDeclared", 1), ("RunEnded", 2)
    ]  # fmt: skip
    assert all(r["kafka"]["topic"] == records and r["kafka"]["partition"] == 0 for r in run["records"])
    assert all(r["worker_committed"] is True for r in run["records"])
    assert run["state"]["status"] == "ended", run["state"]
    assert run["state"]["place"]["topic"] == f"{app_id}-runs-changelog"
    types = [e["type"] for e in run["events"]]
    assert types[0] == "START" and types[-1] == "COMPLETE", types
    for e in run["events"]:
        assert e["place"]["topic"] == events
        assert [(g["group"], g["past"]) for g in e["groups"]] == [(sink_group, True)], e
        assert e["dead_letters"] == []
    assert run["dead_letters"] == []
    ok_run_id = run["run_id"]
    # its state names its root job: only the events partition its key hashes to (murmur2) was read
    assert [c["partitions"] for c in ok["costs"] if c["topic"] == events] == [1], ok["costs"]

    # the same run by its OpenLineage run id: the same records, state and events
    by_id = report(kafka_bootstrap, ok_run_id, *topics)
    assert by_id["found_as"] == "OpenLineage run id"
    assert by_id["runs"] == ok["runs"]

    # a dead-lettered run, by its OpenLineage run id: each event's copy in the DLQ, the group past it
    bad_id = report(kafka_bootstrap, "bad-1", *topics)["runs"][0]["run_id"]
    bad = report(kafka_bootstrap, bad_id, *topics, "--sink-groups", sink_group)
    [run] = bad["runs"]
    assert (run["engine_run_id"], run["log_partition"]) == ("bad-1", 1)
    assert run["events"], run
    for e in run["events"]:
        assert [(g["group"], g["past"]) for g in e["groups"]] == [(sink_group, True)], e
        [copy] = e["dead_letters"]
        assert copy["place"]["topic"] == dlq
        assert copy["reason"] == "rejected" and copy["http_status"] == "400"
        assert copy["source"] == f"{events}[{e['place']['partition']}]@{e['place']['offset']}"
    assert len(run["dead_letters"]) == len(run["events"])
    text = explain(kafka_bootstrap, bad_id, *topics)
    assert text.returncode == 0, text.stderr
    assert f"dead-lettered: {dlq}[" in text.stdout and "HTTP 400" in text.stdout, text.stdout
    print(text.stdout)  # docs/operations.md's example (pytest -rP shows it)

    # a workflow instance: its two runs, the open one's state open and its START delivered
    daily = report(kafka_bootstrap, "daily-2026-01-02", *topics, "--kind", "instance")
    assert daily["found_as"] == "workflow instance"
    assert [r["engine_run_id"] for r in daily["runs"]] == ["ok-1", "open-1"]
    opened = daily["runs"][1]
    assert opened["state"]["status"] == "open"
    assert [e["type"] for e in opened["events"]] == ["START"]
    cut = report(kafka_bootstrap, "daily-2026-01-02", *topics, "--max-runs", "1")
    assert [r["engine_run_id"] for r in cut["runs"]] == ["open-1"] and cut["runs_matched"] == 2

    # one line and exit 2: an unknown run, a missing topic, bad usage
    for args, said in (
        (("no-such-run", *topics), "no run named 'no-such-run'"),
        (("ok-1", *topics[2:], "--records-topic", f"{records}-missing"), "does not exist"),
        (("ok-1", *topics, "--max-runs", "0"), "max_runs"),
    ):
        done = explain(kafka_bootstrap, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr

    # nothing moved: the groups' committed offsets, and no new group (earlier tests' groups may be
    # gone meanwhile: the broker deletes an empty group without offsets, so the set can only shrink)
    assert committed_offsets(kafka_bootstrap, sink_group, events) == sink_before
    assert committed_offsets(kafka_bootstrap, app_id, records) == worker_before
    groups_after = {g.group_id for g in admin.list_consumer_groups().result().valid}
    assert groups_after <= groups_before, groups_after - groups_before
