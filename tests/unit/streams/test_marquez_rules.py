"""The Marquez-rules receiver reproduces what a real Marquez 0.51 did with olstream's events."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from olstream.contract.records import DatasetDeclared, Direction, RunEnded, RunStarted
from olstream.streams.mapping import MappingConfig
from olstream.streams.state import format_time
from tests.support.marquez_rules import JETTY_400, MarquezRules, misplaced_runs, run_uuid, stale_job_versions
from tests.support.receiver import Request
from tests.support.stream_records import T0, Harness, chain, declared, ended, started


def post(rules: MarquezRules, *events: dict[str, Any] | bytes) -> list[int]:
    statuses = []
    for e in events:
        body = e if isinstance(e, bytes) else json.dumps(e).encode()
        statuses.append(rules(Request("POST", "/api/v1/lineage", {}, body, time.monotonic(), None), 0).status)
    return statuses


def depth_4_tree(cfg: MappingConfig) -> list[dict[str, Any]]:
    """START and COMPLETE of a 5-run chain (depth 0..4), in pipeline order (parents first)."""
    runs = chain(5)
    records: list[Any] = []
    for i, r in enumerate(runs):
        records += [r, declared(r.engine_run_id, offset=100 + i, partition=r.partition)]
    records += [ended(r.engine_run_id, offset=200 + i, partition=r.partition) for i, r in enumerate(runs)]
    return [json.loads(o.value) for o in Harness(cfg).feed(*records)]


def children_first(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Deepest runs first, each run's events in their own order."""
    return sorted(events, key=lambda e: -e["job"]["name"].count("@"))


def test_flat_names_put_runs_at_depth_2_and_more_on_phantom_jobs() -> None:
    events = depth_4_tree(MappingConfig(job_names="flat"))
    rules = MarquezRules()
    assert set(post(rules, *events)) == {201}
    problems = misplaced_runs(rules.snapshot(), events)
    assert any("Assuming Run UUID conflict" in p for p in problems), problems
    assert any(p.startswith("phantom job") for p in problems), problems


def test_hierarchical_names_put_every_run_on_its_job_in_any_order() -> None:
    events = depth_4_tree(MappingConfig())
    for order in (events, children_first(events)):
        rules = MarquezRules()
        assert set(post(rules, *order)) == {201}
        model = rules.snapshot()
        assert misplaced_runs(model, events) == []
        deepest = next(j for j in model.jobs.values() if j.name.count(".") == 4)
        assert deepest.simple_name == "t4@4" and deepest.parent == ("acme", "t0@0.t1@1.t2@2.t3@3")
    assert children_first(events)[0]["job"]["name"].endswith("t4@4")  # the order is really reversed


def test_a_start_after_the_terminal_event_reopens_the_run() -> None:
    events = depth_4_tree(MappingConfig())
    start = next(e for e in events if e["eventType"] == "START")
    rules = MarquezRules()
    post(rules, *events, start)
    assert any("is RUNNING" in p for p in misplaced_runs(rules.snapshot(), events))


def test_a_dataset_namespace_marquez_refuses_is_a_400_with_an_html_page() -> None:
    (event, *_) = depth_4_tree(MappingConfig())
    bad = json.loads(json.dumps(event))
    bad["inputs"] = [{"namespace": "s3://données-brutes", "name": "clients/日本.json"}]
    rules = MarquezRules()
    assert post(rules, bad) == [400]
    model = rules.snapshot()
    assert model.rejections[0].reason.startswith("IllegalArgumentException") and model.runs == {}
    assert JETTY_400.startswith(b"<html>")


def test_required_fields_and_facet_fields_are_422() -> None:
    (event, *_) = depth_4_tree(MappingConfig())
    no_job_type = json.loads(json.dumps(event))
    del no_job_type["job"]["facets"]["jobType"]["jobType"]
    no_producer = json.loads(json.dumps(event))
    del no_producer["run"]["facets"]["processing_engine"]  # unknown facets are not checked
    no_producer["job"]["facets"]["jobType"].pop("_producer")
    no_run_id = json.loads(json.dumps(event))
    no_run_id["run"]["runId"] = None
    assert post(MarquezRules(), no_job_type, no_producer, no_run_id, b"{not json") == [422, 422, 422, 400]


def test_datasets_get_the_data_source_facets_name_else_default() -> None:
    events = depth_4_tree(MappingConfig())
    rules = MarquezRules()
    post(rules, *events)
    datasets = rules.snapshot().datasets
    assert datasets and all(source == ns for (ns, _name), source in datasets.items())
    bare = json.loads(json.dumps(events[-1]))
    for ds in bare["inputs"]:
        ds.pop("facets")
    rules = MarquezRules()
    post(rules, bare)
    assert set(rules.snapshot().datasets.values()) == {"default"}


def test_run_ids_that_are_not_uuids_map_like_java_name_uuid_from_bytes() -> None:
    assert run_uuid("abc") == "90015098-3cd2-3fb0-9696-3f7d28e17f72"  # UUID.nameUUIDFromBytes("abc")


def get(rules: MarquezRules, path: str) -> tuple[int, Any]:
    reply = rules(Request("GET", path, {}, b"", time.monotonic(), None), 0)
    return reply.status, json.loads(reply.body) if reply.body else None


def test_sources_are_served_back_and_one_stored_without_a_uri_answers_500_like_marquez() -> None:
    events = depth_4_tree(MappingConfig())
    rules = MarquezRules()
    post(rules, *events)
    status, body = get(rules, "/api/v1/sources/" + quote("postgres://db:5432", safe=""))
    assert (status, body["connectionUrl"]) == (200, "postgres://db:5432")
    assert get(rules, "/api/v1/sources")[0] == 200
    assert get(rules, "/api/v1/sources/nowhere")[0] == 404
    without_uri = json.loads(json.dumps(events[-1]))
    for ds in without_uri["inputs"]:
        ds["namespace"] = ds["facets"]["dataSource"]["name"] = "bigquery"
        del ds["facets"]["dataSource"]["uri"]  # what olstream sent before every facet had a uri
    post(rules, without_uri)
    null_url = {"code": 500, "message": "connectionUrl is marked non-null but is null"}
    assert get(rules, "/api/v1/sources/bigquery") == (500, null_url)
    assert get(rules, "/api/v1/sources")[0] == 500
    for ds in without_uri["inputs"]:
        ds["facets"]["dataSource"]["uri"] = "bigquery:///"
    post(rules, without_uri)  # the upsert replaces the connection URL
    assert get(rules, "/api/v1/sources/bigquery")[1]["connectionUrl"] == "bigquery:///"
    assert get(rules, "/api/v1/sources")[0] == 200


def runs_of_one_job(n: int) -> list[list[dict[str, Any]]]:
    """`n` runs of one job, run i ending at minute i, each reading its own dataset: [START, COMPLETE] each."""
    runs = []
    for i in range(n):
        rid = f"r{i}"
        records = [
            started(rid, offset=0, partition=i),
            declared(rid, offset=1, partition=i, name=f"in_{i}"),
            declared(rid, offset=2, partition=i, name=f"out_{i}", direction=Direction.OUTPUT),
            ended(rid, offset=3, partition=i, at=T0 + timedelta(minutes=i + 1)),
        ]
        runs.append([json.loads(o.value) for o in Harness(MappingConfig()).feed(*records)])
    return runs


def test_the_last_terminal_event_received_sets_the_job_version_whatever_its_event_time() -> None:
    runs = runs_of_one_job(3)
    events = [e for run in runs for e in run]
    rules = MarquezRules()
    post(rules, *events)  # in eventTime order: the latest run's COMPLETE is the last one received
    assert stale_job_versions(rules.snapshot(), events) == []
    version = next(iter(rules.snapshot().job_versions.values()))
    assert version.inputs == {("postgres://db:5432", "in_2")}
    assert version.outputs == {("postgres://db:5432", "out_2")}
    post(rules, runs[0][1])  # an older run's COMPLETE arrives last
    problems = stale_job_versions(rules.snapshot(), events)
    assert len(problems) == 1 and "its latest run is" in problems[0], problems
    post(rules, runs[2][1])  # the latest one repeated, byte for byte: right again
    assert stale_job_versions(rules.snapshot(), events) == []


def test_a_tie_in_event_time_goes_to_the_greater_run_id() -> None:
    runs = runs_of_one_job(2)
    runs[0][1]["eventTime"] = runs[1][1]["eventTime"]
    low, high = sorted(runs, key=lambda run: str(run[1]["run"]["runId"]))
    events = [*low, *high]
    rules = MarquezRules()
    post(rules, *events)  # the greater runId's COMPLETE last: right
    assert stale_job_versions(rules.snapshot(), events) == []
    post(rules, low[1])
    assert stale_job_versions(rules.snapshot(), events) != []


def _open_then_ended(cfg: MappingConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the events of a run before its end, its terminal event): two inputs, one output, a repeat."""
    records = [
        started("r1"),
        declared("r1", offset=1, name="orders"),
        declared("r1", offset=2, direction=Direction.OUTPUT, ns="s3://lake", name="daily"),
        declared("r1", offset=3, name="orders"),
        declared("r1", offset=4, name="customers"),
        ended("r1", offset=5),
    ]
    events = [json.loads(o.value) for o in Harness(cfg).feed(*records)]
    return events[:-1], events[-1:]


def test_running_events_show_an_open_runs_datasets_and_give_the_same_job_version_at_the_end() -> None:
    versions = {}
    for running in (False, True):
        before, terminal = _open_then_ended(MappingConfig(running_events=running))
        assert [e["eventType"] for e in before] == ["START"] + ["RUNNING"] * 3 * running
        rules = MarquezRules()
        assert set(post(rules, *before)) == {201}
        open_model = rules.snapshot()
        (run,) = open_model.runs.values()
        shown = (list(run.inputs), list(run.outputs))
        if running:
            assert shown == ([("postgres://db:5432", "orders"), ("postgres://db:5432", "customers")],
                             [("s3://lake", "daily")])  # fmt: skip
        else:
            assert shown == ([], [])
        assert all(j.version is None for j in open_model.jobs.values()), "no version before the end"
        post(rules, *terminal)
        (job,) = rules.snapshot().jobs.values()
        assert job.inputs == (("postgres://db:5432", "customers"), ("postgres://db:5432", "orders"))
        assert job.outputs == (("s3://lake", "daily"),)
        versions[running] = job.version
    assert versions[True] is not None and versions[True] == versions[False]


def test_the_job_version_is_the_union_of_all_the_runs_events() -> None:
    """A terminal event without a dataset that a RUNNING event carried keeps it in the version."""
    before, terminal = _open_then_ended(MappingConfig(running_events=True))
    end = dict(terminal[0], inputs=[], outputs=[])
    rules = MarquezRules()
    post(rules, *before, end)
    (job,) = rules.snapshot().jobs.values()
    assert len(job.inputs) == 2 and len(job.outputs) == 1
    other = MarquezRules()
    post(other, before[0], end)
    (bare,) = other.snapshot().jobs.values()
    assert bare.inputs == () and bare.version != job.version


def test_with_running_events_marquez_keeps_each_run_s_true_start_and_end() -> None:
    """Marquez sets a run's start from every START and RUNNING event: the RUNNING events carry the
    run's start as eventTime, so the start Marquez keeps is the log's, and the end is the log's too."""
    late = T0 + timedelta(minutes=40)
    records: list[RunStarted | DatasetDeclared | RunEnded] = [
        started("r"),
        declared("r", offset=1, name="a", at=T0 + timedelta(minutes=10)),
        declared("r", offset=2, direction=Direction.OUTPUT, ns="s3://lake", name="b", at=late),
        ended("r", offset=3, at=T0 + timedelta(hours=1)),
    ]
    outs = Harness(MappingConfig(running_events=True)).feed(*records)
    assert [o.event_type for o in outs] == ["START", "RUNNING", "RUNNING", "COMPLETE"]
    rules = MarquezRules()
    assert set(post(rules, *(o.value for o in outs))) == {201}
    run = rules.snapshot().runs[run_uuid(outs[0].run_id)]
    assert run.started_at == format_time(T0) and run.ended_at == format_time(T0 + timedelta(hours=1))
    # the declaration's own time is on the workflow facet of its RUNNING event
    assert json.loads(outs[2].value)["run"]["facets"]["workflow"]["declaredAt"] == format_time(late)
