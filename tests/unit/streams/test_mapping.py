"""The pure mapping: records -> run state -> canonical RunEvent bytes."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

import olstream
from olstream.contract.records import Direction, Record, RunError, RunRef, RunStatus
from olstream.streams.mapping import (
    DEFAULT_PRODUCER,
    OPENLINEAGE_SCHEMA_URL,
    TERMINAL_EVENT_TYPES,
    WORKFLOW_FACET_SCHEMA_URL,
    MappingConfig,
    canonical_bytes,
    start_event,
    terminal_event,
)
from olstream.streams.state import DatasetRef, JobRun, RunEnd, RunState, StreamInputError
from tests.support.stream_records import T0, Harness, declared, doc, ended, ref_of, started

CFG = MappingConfig()
FLAT = MappingConfig(job_names="flat")


def test_start_event_shape_and_key_order() -> None:
    (o,) = Harness().feed(started())
    d = doc(o)
    assert list(d) == ["eventTime", "producer", "schemaURL", "eventType", "run", "job", "inputs", "outputs"]
    assert d["eventType"] == "START"
    assert d["eventTime"] == "2026-01-02T03:04:05.123456Z"
    assert d["producer"] == DEFAULT_PRODUCER
    assert d["schemaURL"] == OPENLINEAGE_SCHEMA_URL
    assert d["job"]["namespace"] == "acme" and d["job"]["name"] == "ingest@3"
    assert d["inputs"] == [] and d["outputs"] == []
    assert uuid.UUID(d["run"]["runId"]).version == 7
    assert list(d["run"]["facets"]) == ["processing_engine", "workflow"]
    assert o.key == b"run:acme/ingest@3"


@pytest.mark.parametrize("status", list(RunStatus))
def test_every_status_maps_to_its_terminal_event(status: RunStatus) -> None:
    h = Harness()
    start, end = h.feed(started(), ended(status=status))
    d = doc(end)
    assert d["eventType"] == TERMINAL_EVENT_TYPES[status.value] == end.event_type
    assert d["eventTime"] == "2026-01-02T03:05:05.123456Z"
    assert d["run"]["runId"] == doc(start)["run"]["runId"]
    assert d["run"]["facets"]["workflow"]["status"] == status.value
    assert ("errorMessage" in d["run"]["facets"]) == (d["eventType"] == "FAIL")


def test_status_map_is_complete() -> None:
    assert {s.value for s in RunStatus} == set(TERMINAL_EVENT_TYPES)
    assert TERMINAL_EVENT_TYPES["completed"] == "COMPLETE"
    assert {k for k, v in TERMINAL_EVENT_TYPES.items() if v == "ABORT"} == {"superseded", "cancelled"}


def test_fail_carries_error_message_with_stack_trace() -> None:
    err = RunError("división por cero", "ZeroDivisionError", "Traceback (most recent call last): ...")
    _, end = Harness().feed(started(), ended(status=RunStatus.POISON, error=err))
    facets = doc(end)["run"]["facets"]
    assert facets["errorMessage"]["message"] == "división por cero"
    assert facets["errorMessage"]["programmingLanguage"] == "PYTHON"
    assert facets["errorMessage"]["stackTrace"].startswith("Traceback")
    assert facets["workflow"]["errorType"] == "ZeroDivisionError"


def test_fail_without_error_details_still_has_a_message_and_no_stack_trace() -> None:
    _, end = Harness().feed(started(), ended(status=RunStatus.QUARANTINED))
    em = doc(end)["run"]["facets"]["errorMessage"]
    assert em["message"] == "workflow run ended with status quarantined"
    assert "stackTrace" not in em


def test_abort_carries_no_error_message_even_with_error() -> None:
    _, end = Harness().feed(started(), ended(status=RunStatus.CANCELLED, error=RunError("user cancelled")))
    assert "errorMessage" not in doc(end)["run"]["facets"]


def test_datasets_accumulate_dedup_in_first_declaration_order_with_versions() -> None:
    h = Harness()
    outs = h.feed(
        started(),
        declared(offset=1, name="b", version="v1"),
        declared(offset=2, name="a"),
        declared(offset=3, name="b", version="v2"),  # repeat: first declaration wins
        declared(offset=4, ns="s3://bucket", name="b"),  # same name, other namespace: distinct
        declared(offset=5, direction=Direction.OUTPUT, name="a", version="sha256:abc"),  # both directions
        declared(offset=6, direction=Direction.OUTPUT, name="ünïcødé/表"),
        ended(offset=7),
    )
    start, end = (doc(o) for o in outs)
    assert start["inputs"] == [] and start["outputs"] == []
    assert [(d["namespace"], d["name"]) for d in end["inputs"]] == [
        ("postgres://db:5432", "b"),
        ("postgres://db:5432", "a"),
        ("s3://bucket", "b"),
    ]
    assert end["inputs"][0]["facets"]["version"]["datasetVersion"] == "v1"
    assert list(end["inputs"][1]["facets"]) == ["dataSource"]  # no version facet without a version
    assert [d["name"] for d in end["outputs"]] == ["a", "ünïcødé/表"]
    assert end["outputs"][0]["facets"]["version"]["datasetVersion"] == "sha256:abc"
    assert h.steps[3].write is None and h.steps[3].replay


def test_nominal_time_only_when_recorded() -> None:
    (o,) = Harness().feed(started(nominal=True))
    nominal = doc(o)["run"]["facets"]["nominalTime"]
    assert nominal["nominalStartTime"] == "2026-01-02T03:00:00.000000Z"
    assert nominal["nominalEndTime"] == "2026-01-02T04:00:00.000000Z"
    (o,) = Harness().feed(started())
    assert "nominalTime" not in doc(o)["run"]["facets"]


def test_processing_engine_job_type_and_workflow_facets() -> None:
    (o,) = Harness().feed(started(principal=None, supersedes="old-run"))
    d = doc(o)
    engine = d["run"]["facets"]["processing_engine"]
    assert engine["name"] == "olstream" and engine["version"] == olstream.__version__
    assert engine["openlineageAdapterVersion"] == olstream.__version__
    jt = d["job"]["facets"]["jobType"]
    assert (jt["processingType"], jt["integration"], jt["jobType"]) == ("BATCH", "OLSTREAM", "WORKFLOW")
    wf = d["run"]["facets"]["workflow"]
    assert wf["_schemaURL"] == WORKFLOW_FACET_SCHEMA_URL
    assert wf["taskId"] == "tenant-7" and wf["workflowInstance"] == "ingest-2026-01-02"
    assert wf["engineRunId"] == "r1" and wf["supersedes"] == "old-run"
    assert "principal" not in wf and "status" not in wf


def test_every_facet_has_producer_and_schema_url() -> None:
    err = RunError("boom", None, "trace")
    outs = Harness().feed(
        started(nominal=True, parent=ref_of(started("p"))),
        declared(version="1"),
        ended(status=RunStatus.FAILED, error=err),
    )
    for o in outs:
        d = doc(o)
        facet_maps = [d["run"]["facets"], d["job"]["facets"]]
        facet_maps += [ds.get("facets", {}) for ds in d["inputs"] + d["outputs"]]
        for facets in facet_maps:
            for name, facet in facets.items():
                assert facet["_producer"] == DEFAULT_PRODUCER, name
                assert facet["_schemaURL"].startswith("https://"), name


def test_job_prefix_applies_to_own_parent_and_root_jobs() -> None:
    h = Harness(MappingConfig(job_prefix="prod.", job_names="flat"))
    root = started("root", wtype="daily", version="1")
    child = started("c", wtype="load", version="2", instance="c", offset=1, parent=ref_of(root))
    outs = h.feed(root, child)
    d = doc(outs[1])
    assert d["job"]["name"] == "prod.load@2"
    assert d["run"]["facets"]["parent"]["job"]["name"] == "prod.daily@1"
    assert outs[1].key == b"run:acme/prod.daily@1"


def test_parent_and_root_from_the_childs_own_record() -> None:
    root = started("root", wtype="daily", instance="d")
    mid = started("mid", wtype="mid", instance="m", parent=ref_of(root), partition=3)
    leaf = started("leaf", wtype="leaf", instance="l", parent=ref_of(mid), root=ref_of(root), partition=5)
    h = Harness(FLAT)
    (o,) = h.feed(leaf)  # parents not in this worker's state at all: the record suffices
    parent = doc(o)["run"]["facets"]["parent"]
    (mid_o,) = Harness(FLAT).feed(mid)
    (root_o,) = Harness(FLAT).feed(root)
    assert parent["run"]["runId"] == doc(mid_o)["run"]["runId"]
    assert parent["job"] == {"namespace": "acme", "name": "mid@3"}
    assert parent["root"]["run"]["runId"] == doc(root_o)["run"]["runId"]
    assert parent["root"]["job"] == {"namespace": "acme", "name": "daily@3"}
    assert o.key == b"run:acme/daily@3"
    assert not h.steps[0].parent_not_visible


def test_full_parent_without_root_uses_parent_as_root_or_the_parents_known_root() -> None:
    root = started("root", wtype="daily", instance="d")
    mid = started("mid", wtype="mid", instance="m", offset=1, parent=ref_of(root))
    leaf = started("leaf", wtype="leaf", instance="l", offset=2, parent=ref_of(mid))  # no root on record
    h = Harness(FLAT)
    outs = h.feed(root, mid, leaf)
    assert doc(outs[1])["run"]["facets"]["parent"]["root"]["job"]["name"] == "daily@3"
    leaf_parent = doc(outs[2])["run"]["facets"]["parent"]
    assert leaf_parent["job"]["name"] == "mid@3"
    assert leaf_parent["root"]["job"]["name"] == "daily@3"  # the parent's root, from state
    (alone,) = Harness(FLAT).feed(leaf)
    assert doc(alone)["run"]["facets"]["parent"]["root"]["job"]["name"] == "mid@3"


def test_partial_parent_resolved_from_state_of_the_same_log_partition() -> None:
    parent = started("p", wtype="daily", instance="d")
    child = started("c", wtype="load", instance="c", offset=5, parent=RunRef("p"))
    h = Harness()
    p_out, c_start, c_end = h.feed(parent, child, ended("c", offset=6))
    for o in (c_start, c_end):
        facet = doc(o)["run"]["facets"]["parent"]
        assert facet["run"]["runId"] == doc(p_out)["run"]["runId"]
        assert facet["root"]["run"]["runId"] == doc(p_out)["run"]["runId"]
    assert doc(c_start)["run"]["facets"]["parent"] == doc(c_end)["run"]["facets"]["parent"]
    assert not h.steps[1].parent_not_visible


@pytest.mark.parametrize("where", ["absent", "other_log_partition"])
def test_partial_parent_not_visible_emits_no_parent_edge(where: str) -> None:
    h = Harness()
    if where == "other_log_partition":
        h.feed(started("p", wtype="daily", instance="d", partition=1))
    start, end = h.feed(started("c", instance="c", parent=RunRef("p")), ended("c"))
    assert h.steps[-2].parent_not_visible
    for o in (start, end):
        assert "parent" not in doc(o)["run"]["facets"]
        assert o.key == b"run:acme/ingest@3"


def test_parent_facet_on_every_event_of_a_child_run() -> None:
    parent = ref_of(started("p", wtype="daily"))
    outs = Harness(FLAT).feed(
        started("c", parent=parent), declared("c"), ended("c", status=RunStatus.SUPERSEDED)
    )
    assert len(outs) == 2
    assert doc(outs[0])["run"]["facets"]["parent"] == doc(outs[1])["run"]["facets"]["parent"]
    assert outs[0].key == outs[1].key == b"run:acme/daily@3"


def test_canonical_bytes_compact_utf8_and_stable() -> None:
    h = Harness()
    outs = h.feed(started(instance="ínstance-流"), declared(name="naïve"), ended())
    for o in outs:
        assert b": " not in o.value and b", " not in o.value and b"\n" not in o.value
        assert "流".encode() in o.value or "naïve".encode() in o.value
        assert b"\\u" not in o.value
        assert canonical_bytes(json.loads(o.value)) == o.value
    again = Harness().feed(started(instance="ínstance-流"), declared(name="naïve"), ended())
    assert [o.value for o in again] == [o.value for o in outs]


def test_replays_emit_identical_bytes() -> None:
    h = Harness()
    s, e = started(), ended()
    (first_start,) = h.feed(s)
    (replayed_start,) = h.feed(s)
    assert replayed_start.value == first_start.value and h.steps[-1].replay and h.steps[-1].write is None
    h.feed(declared())
    (first_end,) = h.feed(e)
    (replayed_end,) = h.feed(e)
    assert replayed_end.value == first_end.value and h.steps[-1].replay
    assert h.feed(declared()) == []  # a replayed declaration changes nothing


def test_replayed_start_of_an_ended_run_is_not_resent() -> None:
    h = Harness()
    h.feed(started(), ended())
    assert h.feed(started()) == []
    assert h.steps[-1].replay


def test_state_independent_of_time_of_processing_and_worker() -> None:
    records = [
        started(),
        declared(version="x"),
        ended(status=RunStatus.RETRIES_EXHAUSTED, error=RunError("e")),
    ]
    assert [o.value for o in Harness().feed(*records)] == [o.value for o in Harness().feed(*records)]


@pytest.mark.parametrize(
    ("records", "reason"),
    [
        ([declared("ghost")], "unknown_run"),
        ([ended("ghost")], "unknown_run"),
        (
            [started(), ended(status=RunStatus.COMPLETED), ended(status=RunStatus.FAILED, offset=10)],
            "conflicting_end",
        ),
        ([started(), ended(), declared(offset=20, name="late")], "declaration_after_end"),
        # the same dataset again after the end, with a new version or none: refused too, never dropped
        ([started(), declared(), ended(), declared(offset=20, version="v2")], "declaration_after_end"),
        ([started(), declared(), ended(), declared(offset=20)], "declaration_after_end"),
        ([started(), started(offset=3)], "duplicate_start"),
    ],
)
def test_bad_input_raises_with_reason_and_position(records: list[Record], reason: str) -> None:
    h = Harness()
    h.feed(*records[:-1])
    with pytest.raises(StreamInputError) as info:
        h.feed(records[-1])
    assert info.value.reason == reason
    assert info.value.offset == records[-1].offset
    assert f"offset {records[-1].offset}" in str(info.value)


def test_event_time_from_the_record_not_the_clock() -> None:
    late = T0 + timedelta(days=400, microseconds=1)
    _, end = Harness().feed(started(), ended(at=late))
    assert doc(end)["eventTime"] == "2027-02-06T03:04:05.123457Z"


ODD = '"\\\n\t\x00\x01\x1f\x7fé\u2028\u2029</😀'
# ODD percent-encoded as a URI path holds it (its "/" kept)
ODD_IN_URI = "%22%5C%0A%09%00%01%1F%7F%C3%A9%E2%80%A8%E2%80%A9%3C/%F0%9F%98%80"
ODD_CFG = MappingConfig(
    producer='p"\\é\u2028😀',
    job_prefix="x/é",
    integration="I\n",
    job_type="W\x00",
    programming_language="py\x00",
)


def _odd_strings(s: RunState, text: str) -> RunState:
    """`s` with `text` in every string the event carries (the end's status excepted: it picks the type)."""
    odd_run = JobRun(text, text, text)
    return replace(
        s,
        engine_run_id=text,
        task_id=text,
        workflow_type=text,
        workflow_version=text,
        workflow_instance=text,
        principal=text,
        start_time=text,
        nominal_start_time=text,
        nominal_end_time=text,
        supersedes=text,
        run=odd_run,
        parent=odd_run,
        root=odd_run,
        inputs=(DatasetRef(text, text, text), DatasetRef(text, text)),
        outputs=(DatasetRef(text, text), DatasetRef(f"s3://{text}", text, text)),
        inputs_at_start=1,
        outputs_at_start=2,
        end=None
        if s.end is None
        else replace(s.end, end_time=text, error_message=text, error_type=text, stack_trace=text),
    )


@pytest.mark.parametrize("cfg", [CFG, ODD_CFG], ids=["default", "odd_config"])
def test_written_bytes_are_json_dumps_of_their_own_document(cfg: MappingConfig) -> None:
    """Compact, key order kept and every string escaped exactly as json.dumps(ensure_ascii=False) does."""
    root = ref_of(started("root", wtype="daily"))
    parent = ref_of(started("p", wtype="hourly", parent=root, root=root))
    h = Harness(cfg)
    h.feed(
        started("a", nominal=True, principal=None),
        declared("a", name="in1", version="v1"),
        declared("a", name="out1", direction=Direction.OUTPUT, ns="warehouse"),
        ended("a", status=RunStatus.FAILED, error=RunError(message="", type="E", stack_trace="tb")),
        started("b", parent=parent, root=root, supersedes="a"),
        ended("b", status=RunStatus.CANCELLED),
        started("c", parent=parent),
        ended("c"),
        started("d"),  # no end: no terminal event
    )
    states = list(h.table.values())
    variants = [*states]
    for s in states:
        variants += [_odd_strings(s, ODD), _odd_strings(s, "")]
        variants.append(
            replace(s, principal=None, supersedes=None, nominal_start_time=ODD, nominal_end_time=None)
        )
        if s.end is not None:
            variants.append(replace(s, end=replace(s.end, status="poison", error_message="", error_type=ODD)))
            variants.append(replace(s, end=replace(s.end, status="quarantined", error_message=None)))
    events = [start_event(cfg, s) for s in variants]
    events += [terminal_event(cfg, s) for s in variants if s.end is not None]
    assert len(events) == 22 + 18  # every variant starts; those of the three ended runs end too
    for written in events:
        document = json.loads(written)
        assert written == json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


# The documents below are written out in full: every facet and field an event can carry, in order.
P = DEFAULT_PRODUCER
V = olstream.__version__
PARENT_URL = "https://openlineage.io/spec/facets/1-2-0/ParentRunFacet.json#/$defs/ParentRunFacet"
NOMINAL_URL = "https://openlineage.io/spec/facets/1-0-1/NominalTimeRunFacet.json#/$defs/NominalTimeRunFacet"
ENGINE_URL = (
    "https://openlineage.io/spec/facets/1-1-1/ProcessingEngineRunFacet.json#/$defs/ProcessingEngineRunFacet"
)
WORKFLOW_URL = "https://olstream.dev/spec/facets/1-0-0/WorkflowRunFacet.json"
ERROR_URL = "https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet"
JOB_TYPE_URL = "https://openlineage.io/spec/facets/2-0-4/JobTypeJobFacet.json#/$defs/JobTypeJobFacet"
VERSION_URL = "https://openlineage.io/spec/facets/1-0-1/DatasetVersionDatasetFacet.json#/$defs/DatasetVersionDatasetFacet"
SOURCE_URL = (
    "https://openlineage.io/spec/facets/1-0-1/DatasourceDatasetFacet.json#/$defs/DatasourceDatasetFacet"
)
RUN_EVENT_URL = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
ENGINE = {
    "_producer": P,
    "_schemaURL": ENGINE_URL,
    "version": V,
    "name": "olstream",
    "openlineageAdapterVersion": V,
}
JOB_FACETS = {
    "jobType": {
        "_producer": P,
        "_schemaURL": JOB_TYPE_URL,
        "processingType": "BATCH",
        "integration": "OLSTREAM",
        "jobType": "WORKFLOW",
    }
}
RUN_ID = "019b7ca9-8d03-75a6-baae-156f1aa4f6a1"
PARENT_ID = "019b7ca9-8d03-735f-b34a-e70b8cfbd051"
ROOT_ID = "019b7ca9-8b00-7000-8000-000000000001"
START = "2026-01-02T03:04:05.123456Z"
END = "2026-01-02T03:05:05.123456Z"


def _state(**changes: Any) -> RunState:
    """A run `load@2` of `acme`, started at START, with no parent, datasets or end: then `changes`."""
    base = RunState(
        engine_run_id="r1",
        task_id="tenant-7",
        namespace="acme",
        workflow_type="load",
        workflow_version="2",
        workflow_instance="load-eu",
        principal=None,
        start_time=START,
        start_ms=0,
        nominal_start_time=None,
        nominal_end_time=None,
        supersedes=None,
        run=JobRun("acme", "load@2", RUN_ID),
        parent=None,
        root=None,
        start_position=(0, 0),
    )
    return replace(base, **changes)


def _ordered(x: Any) -> Any:
    """`x` with every object as its list of (key, value) pairs: == then compares key order too."""
    if isinstance(x, dict):
        return [(k, _ordered(v)) for k, v in x.items()]
    if isinstance(x, list):
        return [_ordered(v) for v in x]
    return x


def _assert_document(written: bytes, expected: dict[str, Any]) -> None:
    document = json.loads(written)
    assert document == expected
    assert _ordered(document) == _ordered(expected)


def test_start_of_a_child_with_parent_and_root_in_full() -> None:
    s = _state(
        principal="scheduler",
        supersedes="r0",
        run=JobRun("acme", "nightly@1.daily@7.load@2", RUN_ID),
        parent=JobRun("acme", "nightly@1.daily@7", PARENT_ID),
        root=JobRun("ops", "nightly@1", ROOT_ID),
        inputs=(DatasetRef("postgres://db:5432", "shop.orders", "v1"), DatasetRef("s3://bucket", "late")),
        outputs=(DatasetRef("s3://bucket", "out"),),
        inputs_at_start=1,  # the START carries only what was declared before it
    )
    _assert_document(
        start_event(CFG, s),
        {
            "eventTime": START,
            "producer": P,
            "schemaURL": RUN_EVENT_URL,
            "eventType": "START",
            "run": {
                "runId": RUN_ID,
                "facets": {
                    "parent": {
                        "_producer": P,
                        "_schemaURL": PARENT_URL,
                        "run": {"runId": PARENT_ID},
                        "job": {"namespace": "acme", "name": "nightly@1.daily@7"},
                        "root": {"run": {"runId": ROOT_ID}, "job": {"namespace": "ops", "name": "nightly@1"}},
                    },
                    "processing_engine": ENGINE,
                    "workflow": {
                        "_producer": P,
                        "_schemaURL": WORKFLOW_URL,
                        "taskId": "tenant-7",
                        "workflowType": "load",
                        "workflowVersion": "2",
                        "workflowInstance": "load-eu",
                        "engineRunId": "r1",
                        "principal": "scheduler",
                        "supersedes": "r0",
                    },
                },
            },
            "job": {"namespace": "acme", "name": "nightly@1.daily@7.load@2", "facets": JOB_FACETS},
            "inputs": [
                {
                    "namespace": "postgres://db:5432",
                    "name": "shop.orders",
                    "facets": {
                        "dataSource": {
                            "_producer": P,
                            "_schemaURL": SOURCE_URL,
                            "name": "postgres://db:5432",
                            "uri": "postgres://db:5432",
                        },
                        "version": {"_producer": P, "_schemaURL": VERSION_URL, "datasetVersion": "v1"},
                    },
                }
            ],
            "outputs": [],
        },
    )


def test_fail_with_error_message_and_stack_trace_in_full() -> None:
    s = _state(
        principal="alice",
        parent=JobRun("acme", "nightly@1", PARENT_ID),
        root=JobRun("acme", "nightly@1", PARENT_ID),
        end=RunEnd(
            "retries_exhausted", END, 0, "connection refused", "ConnectionError", "Traceback ...\n  x"
        ),
    )
    _assert_document(
        terminal_event(CFG, s),
        {
            "eventTime": END,
            "producer": P,
            "schemaURL": RUN_EVENT_URL,
            "eventType": "FAIL",
            "run": {
                "runId": RUN_ID,
                "facets": {
                    "parent": {
                        "_producer": P,
                        "_schemaURL": PARENT_URL,
                        "run": {"runId": PARENT_ID},
                        "job": {"namespace": "acme", "name": "nightly@1"},
                        "root": {
                            "run": {"runId": PARENT_ID},
                            "job": {"namespace": "acme", "name": "nightly@1"},
                        },
                    },
                    "processing_engine": ENGINE,
                    "workflow": {
                        "_producer": P,
                        "_schemaURL": WORKFLOW_URL,
                        "taskId": "tenant-7",
                        "workflowType": "load",
                        "workflowVersion": "2",
                        "workflowInstance": "load-eu",
                        "engineRunId": "r1",
                        "principal": "alice",
                        "status": "retries_exhausted",
                        "errorType": "ConnectionError",
                    },
                    "errorMessage": {
                        "_producer": P,
                        "_schemaURL": ERROR_URL,
                        "message": "connection refused",
                        "programmingLanguage": "PYTHON",
                        "stackTrace": "Traceback ...\n  x",
                    },
                },
            },
            "job": {"namespace": "acme", "name": "load@2", "facets": JOB_FACETS},
            "inputs": [],
            "outputs": [],
        },
    )


def test_abort_in_full_parent_without_root_and_no_error_message() -> None:
    s = _state(
        parent=JobRun("acme", "daily@7", PARENT_ID),
        end=RunEnd("cancelled", END, 0, "user cancelled", "Cancelled", "trace"),
    )
    _assert_document(
        terminal_event(CFG, s),
        {
            "eventTime": END,
            "producer": P,
            "schemaURL": RUN_EVENT_URL,
            "eventType": "ABORT",
            "run": {
                "runId": RUN_ID,
                "facets": {
                    "parent": {
                        "_producer": P,
                        "_schemaURL": PARENT_URL,
                        "run": {"runId": PARENT_ID},
                        "job": {"namespace": "acme", "name": "daily@7"},
                    },
                    "processing_engine": ENGINE,
                    "workflow": {
                        "_producer": P,
                        "_schemaURL": WORKFLOW_URL,
                        "taskId": "tenant-7",
                        "workflowType": "load",
                        "workflowVersion": "2",
                        "workflowInstance": "load-eu",
                        "engineRunId": "r1",
                        "status": "cancelled",
                        "errorType": "Cancelled",
                    },
                },
            },
            "job": {"namespace": "acme", "name": "load@2", "facets": JOB_FACETS},
            "inputs": [],
            "outputs": [],
        },
    )


def test_complete_with_nominal_time_versions_and_a_namespace_that_is_not_a_uri_in_full() -> None:
    s = _state(
        nominal_start_time="2026-01-02T03:00:00.000000Z",
        nominal_end_time="2026-01-02T04:00:00.000000Z",
        inputs=(DatasetRef("warehouse", "sales.daily", "7"), DatasetRef("postgres://db:5432", "shop.orders")),
        outputs=(DatasetRef("s3://bucket", "report/2026", "sha256:abc"),),
        end=RunEnd("completed", END, 0),
    )
    _assert_document(
        terminal_event(CFG, s),
        {
            "eventTime": END,
            "producer": P,
            "schemaURL": RUN_EVENT_URL,
            "eventType": "COMPLETE",
            "run": {
                "runId": RUN_ID,
                "facets": {
                    "nominalTime": {
                        "_producer": P,
                        "_schemaURL": NOMINAL_URL,
                        "nominalStartTime": "2026-01-02T03:00:00.000000Z",
                        "nominalEndTime": "2026-01-02T04:00:00.000000Z",
                    },
                    "processing_engine": ENGINE,
                    "workflow": {
                        "_producer": P,
                        "_schemaURL": WORKFLOW_URL,
                        "taskId": "tenant-7",
                        "workflowType": "load",
                        "workflowVersion": "2",
                        "workflowInstance": "load-eu",
                        "engineRunId": "r1",
                        "status": "completed",
                    },
                },
            },
            "job": {"namespace": "acme", "name": "load@2", "facets": JOB_FACETS},
            "inputs": [
                {
                    "namespace": "warehouse",
                    "name": "sales.daily",
                    "facets": {
                        "dataSource": {
                            "_producer": P,
                            "_schemaURL": SOURCE_URL,
                            "name": "warehouse",
                            "uri": "warehouse:///",
                        },
                        "version": {"_producer": P, "_schemaURL": VERSION_URL, "datasetVersion": "7"},
                    },
                },
                {
                    "namespace": "postgres://db:5432",
                    "name": "shop.orders",
                    "facets": {
                        "dataSource": {
                            "_producer": P,
                            "_schemaURL": SOURCE_URL,
                            "name": "postgres://db:5432",
                            "uri": "postgres://db:5432",
                        }
                    },
                },
            ],
            "outputs": [
                {
                    "namespace": "s3://bucket",
                    "name": "report/2026",
                    "facets": {
                        "dataSource": {
                            "_producer": P,
                            "_schemaURL": SOURCE_URL,
                            "name": "s3://bucket",
                            "uri": "s3://bucket",
                        },
                        "version": {
                            "_producer": P,
                            "_schemaURL": VERSION_URL,
                            "datasetVersion": "sha256:abc",
                        },
                    },
                }
            ],
        },
    )


def test_odd_strings_and_config_land_unchanged_in_full() -> None:
    """Escapes, NUL, U+2028, emoji and empty strings, in the state and in the config: decoded as given.
    An empty error message falls back to the default one; the start of a nominal time goes without its end."""
    o = ODD
    p = ODD_CFG.producer
    s = _state(
        engine_run_id=o,
        task_id="",
        workflow_type=o,
        workflow_version="",
        workflow_instance=o,
        principal="",
        nominal_start_time=o,
        supersedes=o,
        run=JobRun(o, "", o),
        parent=JobRun("", o, ""),
        root=JobRun(o, o, o),
        inputs=(DatasetRef(o, "", o), DatasetRef("", o)),
        outputs=(DatasetRef(f"file:{o}", o, ""),),
        end=RunEnd("poison", o, 0, "", "", o),
    )
    _assert_document(
        terminal_event(ODD_CFG, s),
        {
            "eventTime": o,
            "producer": p,
            "schemaURL": RUN_EVENT_URL,
            "eventType": "FAIL",
            "run": {
                "runId": o,
                "facets": {
                    "parent": {
                        "_producer": p,
                        "_schemaURL": PARENT_URL,
                        "run": {"runId": ""},
                        "job": {"namespace": "", "name": o},
                        "root": {"run": {"runId": o}, "job": {"namespace": o, "name": o}},
                    },
                    "nominalTime": {"_producer": p, "_schemaURL": NOMINAL_URL, "nominalStartTime": o},
                    "processing_engine": {
                        "_producer": p,
                        "_schemaURL": ENGINE_URL,
                        "version": V,
                        "name": "olstream",
                        "openlineageAdapterVersion": V,
                    },
                    "workflow": {
                        "_producer": p,
                        "_schemaURL": WORKFLOW_URL,
                        "taskId": "",
                        "workflowType": o,
                        "workflowVersion": "",
                        "workflowInstance": o,
                        "engineRunId": o,
                        "principal": "",
                        "supersedes": o,
                        "status": "poison",
                        "errorType": "",
                    },
                    "errorMessage": {
                        "_producer": p,
                        "_schemaURL": ERROR_URL,
                        "message": "workflow run ended with status poison",
                        "programmingLanguage": "py\x00",
                        "stackTrace": o,
                    },
                },
            },
            "job": {
                "namespace": o,
                "name": "",
                "facets": {
                    "jobType": {
                        "_producer": p,
                        "_schemaURL": JOB_TYPE_URL,
                        "processingType": "BATCH",
                        "integration": "I\n",
                        "jobType": "W\x00",
                    }
                },
            },
            "inputs": [
                {
                    "namespace": o,
                    "name": "",
                    "facets": {
                        "dataSource": {
                            "_producer": p,
                            "_schemaURL": SOURCE_URL,
                            "name": o,
                            "uri": "urn:olstream:namespace:" + ODD_IN_URI,
                        },
                        "version": {"_producer": p, "_schemaURL": VERSION_URL, "datasetVersion": o},
                    },
                },
                {
                    "namespace": "",
                    "name": o,
                    "facets": {
                    "dataSource": {
                        "_producer": p,
                        "_schemaURL": SOURCE_URL,
                        "name": "",
                        "uri": "urn:olstream:namespace:",
                    }
                },
                },
            ],
            "outputs": [
                {
                    "namespace": f"file:{o}",
                    "name": o,
                    "facets": {
                        "dataSource": {
                            "_producer": p,
                            "_schemaURL": SOURCE_URL,
                            "name": f"file:{o}",
                            "uri": "urn:olstream:namespace:file:" + ODD_IN_URI,  # not a URI: the URN
                        },
                        "version": {"_producer": p, "_schemaURL": VERSION_URL, "datasetVersion": ""},
                    },
                }
            ],
        },
    )


def test_the_start_of_an_ended_run_carries_no_end() -> None:
    s = _state(end=RunEnd("failed", END, 0, "boom", "E", "tb"))
    document = json.loads(start_event(CFG, s))
    assert document["eventType"] == "START" and document["eventTime"] == START
    assert list(document["run"]["facets"]) == ["processing_engine", "workflow"]
    assert "status" not in document["run"]["facets"]["workflow"]
    with pytest.raises(ValueError, match="has not ended"):
        terminal_event(CFG, _state())


def test_a_replayed_declaration_after_the_end_is_a_replay_not_an_error() -> None:
    """Replays reach a state that is ahead of them (it was stored after the batch's sends): a record
    at or below the last offset that changed the run was applied before and changes nothing."""
    records = [started(), declared(), declared(offset=2), ended(offset=3)]  # offset 2 repeats offset 1
    h = Harness()
    first = [o.value for o in h.feed(*records)]
    # the whole range again: no START after the end, the identical terminal event, no error
    assert [o.value for o in h.feed(*records)] == first[-1:]
    assert all(s.write is None for s in h.steps[len(records) :])
    assert [d.name for d in h.state("r1").inputs] == ["shop.public.orders"]


def test_an_engine_run_id_reused_on_two_log_partitions_gives_two_runs() -> None:
    """Run state is keyed by (log partition, engine run id): neither run's events are dropped, and the
    result is the same whether one worker sees both partitions or two workers see one each."""
    a: list[Record] = [
        started("r1", partition=0, instance="a"),
        declared("r1", partition=0, name="a.in"),
        ended("r1", partition=0),
    ]
    b: list[Record] = [
        started("r1", partition=1, instance="b"),
        declared("r1", partition=1, name="b.in"),
        ended("r1", partition=1, status=RunStatus.FAILED),
    ]
    interleaved = [x for pair in zip(a, b, strict=True) for x in pair]
    together = [o.value for o in Harness().feed(*interleaved)]
    apart = [o.value for o in Harness().feed(*a)] + [o.value for o in Harness().feed(*b)]
    assert sorted(together) == sorted(apart)
    docs = [json.loads(v) for v in together]
    assert [d["eventType"] for d in docs] == ["START", "START", "COMPLETE", "FAIL"]
    assert len({d["run"]["runId"] for d in docs}) == 2
    inputs = {d["run"]["runId"]: [i["name"] for i in d["inputs"]] for d in docs if d["eventType"] != "START"}
    assert sorted(inputs.values()) == [["a.in"], ["b.in"]]
