"""Hierarchical job names, namespaces receivers accept, and the dataSource facet (no I/O)."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import replace
from typing import Any

import fastavro
import pytest

from olstream.contract import codec
from olstream.contract.naming import (
    MAX_JOB_PATH_BYTES,
    NamespaceError,
    child_job_path,
    is_absolute_uri,
    normalize_namespace,
    source_uri,
)
from olstream.contract.records import RunRef, RunStarted, RunStatus
from olstream.eventlog.writer import EventLogWriter
from olstream.streams.mapping import MappingConfig
from olstream.streams.state import StreamInputError, state_key
from olstream.streams.state_store import dumps_state, loads_state
from tests.support.memory_store import MemoryEventLogStore
from tests.support.stream_records import T0, Harness, chain, declared, doc, ended, path_ref, ref_of, started


def test_a_depth_5_chain_names_every_job_by_its_dotted_path_and_its_parent_exactly() -> None:
    runs = chain(5)
    events = [doc(o) for o in Harness().feed(*runs)]
    names = [e["job"]["name"] for e in events]
    assert names == ["t0@0", "t0@0.t1@1", "t0@0.t1@1.t2@2", "t0@0.t1@1.t2@2.t3@3", "t0@0.t1@1.t2@2.t3@3.t4@4"]
    for parent, child in itertools.pairwise(events):
        facet = child["run"]["facets"]["parent"]
        # the parent exactly as its own events name it
        assert facet["job"] == {"namespace": parent["job"]["namespace"], "name": parent["job"]["name"]}
        assert facet["run"]["runId"] == parent["run"]["runId"]
        assert facet["root"]["job"] == {"namespace": "acme", "name": "t0@0"}
        assert facet["root"]["run"]["runId"] == events[0]["run"]["runId"]


def test_the_job_prefix_comes_once_at_the_front() -> None:
    events = [doc(o) for o in Harness(MappingConfig(job_prefix="prod.")).feed(*chain(3))]
    assert [e["job"]["name"] for e in events] == ["prod.t0@0", "prod.t0@0.t1@1", "prod.t0@0.t1@1.t2@2"]
    assert events[2]["run"]["facets"]["parent"]["job"]["name"] == "prod.t0@0.t1@1"
    assert events[2]["run"]["facets"]["parent"]["root"]["job"]["name"] == "prod.t0@0"


def test_every_event_of_a_child_carries_the_same_parent_facet() -> None:
    root, child = chain(2)
    outs = Harness().feed(
        root, child, declared("r1", partition=1, offset=3), ended("r1", partition=1, status=RunStatus.FAILED)
    )
    start, end = doc(outs[1]), doc(outs[2])
    assert start["run"]["facets"]["parent"] == end["run"]["facets"]["parent"]
    assert start["job"] == end["job"]


def test_a_parent_visible_in_the_same_log_partition_gives_its_path() -> None:
    root, mid = chain(2, partition_step=0)
    leaf = started("leaf", wtype="leaf", instance="l", offset=5, parent=RunRef("r1"))  # id only
    h = Harness()
    _, mid_out, leaf_out = h.feed(root, mid, leaf)
    assert doc(leaf_out)["job"]["name"] == "t0@0.t1@1.leaf@3"
    mid_job = doc(mid_out)["job"]
    assert doc(leaf_out)["run"]["facets"]["parent"]["job"] == {"namespace": "acme", "name": mid_job["name"]}
    assert mid_job["name"] == "t0@0.t1@1"
    assert not h.steps[-1].parent_not_visible


def test_a_complete_parent_that_is_also_the_root_needs_no_path_on_record() -> None:
    root = started("p", wtype="daily", instance="d", partition=1)
    child = started("c", wtype="load", instance="c", parent=ref_of(root), root=ref_of(root))  # v2 shape
    (o,) = Harness().feed(child)
    assert doc(o)["job"]["name"] == "daily@3.load@3"
    assert doc(o)["run"]["facets"]["parent"]["job"]["name"] == "daily@3"


@pytest.mark.parametrize("parent", ["id_only", "complete_without_path"])
def test_a_parent_whose_path_is_unknown_gives_a_root_named_run_and_is_counted(parent: str) -> None:
    grand = started("g", wtype="daily", instance="g", partition=2)
    mid = started("p", wtype="mid", instance="p", partition=3, parent=ref_of(grand))
    ref = RunRef("p") if parent == "id_only" else ref_of(mid)  # no job_name, root not the parent
    h = Harness()
    h.feed(started("x", wtype="daily", instance="x", partition=1))  # other runs do not help
    start, end = h.feed(started("c", wtype="load", instance="c", parent=ref, root=ref_of(grand)), ended("c"))
    assert h.steps[-2].parent_not_visible
    for o in (start, end):
        assert doc(o)["job"]["name"] == "load@3"  # never a guessed path
        assert "parent" not in doc(o)["run"]["facets"]
        assert o.key == b"run:acme/load@3"


def test_a_path_over_the_limit_starts_anew_without_a_parent_edge() -> None:
    long_type = "w" * 300
    runs: list[RunStarted] = []
    path = ""
    for i in range(6):
        parent = runs[-1] if runs else None
        runs.append(
            started(
                f"r{i}",
                wtype=long_type,
                version=str(i),
                instance=f"i{i}",
                partition=i,
                parent=None if parent is None else path_ref(parent, path),
            )
        )
        path = child_job_path(path, f"{long_type}@{i}")[0] if path else f"{long_type}@{i}"
    h = Harness()
    events = [doc(o) for o in h.feed(*runs)]
    names = [e["job"]["name"] for e in events]
    assert all(len(n.encode()) <= MAX_JOB_PATH_BYTES for n in names)
    restarted = [i for i, s in enumerate(h.steps) if s.job_path_too_long]
    assert restarted == [3]  # 3 segments of 302 bytes and 2 dots fit in 1024 bytes; a 4th does not
    assert names[3] == f"{long_type}@3" and "parent" not in events[3]["run"]["facets"]
    assert names[4] == f"{long_type}@3.{long_type}@4"  # its child extends the new path, as the writer does
    assert events[4]["run"]["facets"]["parent"]["job"]["name"] == names[3]
    assert events[5]["run"]["facets"]["parent"]["job"]["name"] == names[4]


def test_flat_names_keep_todays_names() -> None:
    events = [doc(o) for o in Harness(MappingConfig(job_names="flat")).feed(*chain(3))]
    assert [e["job"]["name"] for e in events] == ["t0@0", "t1@1", "t2@2"]
    assert events[2]["run"]["facets"]["parent"]["job"]["name"] == "t1@1"


def test_an_unknown_job_names_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="hierarchical, flat"):
        MappingConfig(job_names="dotted")


def test_hierarchical_state_round_trips_and_replays_identically() -> None:
    runs = chain(3)
    h = Harness()
    first = [o.value for o in h.feed(*runs)]
    state = h.state("r2", 2)
    assert state.job_path == "t0@0.t1@1.t2@2"
    assert loads_state(dumps_state(state)) == state
    assert [o.value for o in h.feed(*runs)] == first  # replays re-emit the same bytes
    assert [o.value for o in Harness().feed(*runs)] == first


# ---------------------------------------------------------------- namespaces


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("postgres://orders-db.internal:5432", "postgres://orders-db.internal:5432"),
        ("bigquery", "bigquery"),
        ("s3://données-brutes", "s3://xn--donnes-brutes-ehb"),
        ("postgres://crm.bücher.example:5432", "postgres://crm.xn--bcher-kva.example:5432"),
        ("postgres://ops@Bücher.example:5432/db", "postgres://ops@xn--bcher-kva.example:5432/db"),
    ],
)
def test_namespaces_keep_ascii_and_get_the_idna_form_of_a_non_ascii_host(raw: str, normalized: str) -> None:
    assert normalize_namespace(raw) == normalized
    assert normalize_namespace(normalized) == normalized


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("", "empty"),
        ("file:///données", "'é'"),
        ("s3://my bucket", "' '"),
        ("crm%20db", "'%'"),
        ("x" * 1025, "at most 1024"),
        ("s3://a\u0000b", "has '\\\\x00'"),
    ],
)
def test_a_namespace_with_no_accepted_form_is_refused_with_the_reason(raw: str, why: str) -> None:
    with pytest.raises(NamespaceError, match=why.replace("(", r"\(")):
        normalize_namespace(raw)


def test_the_worker_normalizes_namespaces_and_adds_a_datasource_to_every_dataset() -> None:
    outs = Harness().feed(
        started(),
        declared(ns="s3://données-brutes", name="clients/日本.json"),
        declared(offset=2, ns="bigquery", name="p.d.t"),
        declared(offset=3, ns="s3://xn--donnes-brutes-ehb", name="clients/日本.json"),  # the same dataset
        ended(),
    )
    start, end = (doc(o) for o in outs)
    assert start["inputs"] == []
    inputs = end["inputs"]
    assert [(d["namespace"], d["name"]) for d in inputs] == [
        ("s3://xn--donnes-brutes-ehb", "clients/日本.json"),  # dataset names stay UTF-8
        ("bigquery", "p.d.t"),
    ]
    source = inputs[0]["facets"]["dataSource"]
    assert source["_schemaURL"].endswith("DatasourceDatasetFacet.json#/$defs/DatasourceDatasetFacet")
    assert (source["name"], source["uri"]) == ("s3://xn--donnes-brutes-ehb", "s3://xn--donnes-brutes-ehb")
    bigquery = inputs[1]["facets"]["dataSource"]
    assert (bigquery["name"], bigquery["uri"]) == ("bigquery", "bigquery:///")  # a bare name: still a URI


@pytest.mark.parametrize(
    ("records", "field"),
    [
        ([started(namespace="ünïcode ns")], "namespace"),
        ([started(namespace="team=data;prod")], "namespace"),  # Marquez rewrites = and ; in job namespaces
        ([started(parent=RunRef("p", namespace="a b"))], "parent.namespace"),
        ([started(), declared(ns="file:///données", offset=4)], "dataset_namespace"),
    ],
)
def test_a_namespace_the_worker_cannot_normalize_is_bad_input_naming_the_field(
    records: list[Any], field: str
) -> None:
    h = Harness()
    h.feed(*records[:-1])
    with pytest.raises(StreamInputError) as info:
        h.feed(records[-1])
    assert info.value.reason == "invalid_namespace"
    assert info.value.offset == records[-1].offset and info.value.partition == records[-1].partition
    assert str(info.value).startswith(f"record at log partition 0, offset {records[-1].offset}: {field}: ")


# ---------------------------------------------------------------- the writer and the contract


def test_the_writer_puts_each_runs_job_path_on_its_childrens_references() -> None:
    store = MemoryEventLogStore(partitions=4)
    writer = EventLogWriter(store, clock=lambda: T0)
    root = writer.run_started(namespace="n", workflow_type="a", workflow_version="1", workflow_instance="i",
                              task_id="t")  # fmt: skip
    child = writer.run_started(namespace="n", workflow_type="b", workflow_version="2", workflow_instance="j",
                               task_id="t", parent=root)  # fmt: skip
    leaf = writer.run_started(namespace="n", workflow_type="c", workflow_version="3", workflow_instance="k",
                              task_id="t", parent=child)  # fmt: skip
    orphan = writer.run_started(namespace="n", workflow_type="d", workflow_version="4", workflow_instance="m",
                                task_id="t", parent=RunRef("elsewhere"))  # fmt: skip
    assert (root.ref.job_name, child.ref.job_name, leaf.ref.job_name) == ("a@1", "a@1.b@2", "a@1.b@2.c@3")
    assert orphan.ref.job_name is None  # not known to the writer: the worker decides
    records = [codec.decode(row.payload) for row in store.all_rows()]
    starts = {r.engine_run_id: r for r in records if isinstance(r, RunStarted)}
    leaf_record = starts[leaf.engine_run_id]
    assert leaf_record.parent is not None and leaf_record.parent.job_name == "a@1.b@2"
    assert leaf_record.root is not None and leaf_record.root.job_name == "a@1"
    # and the worker names them as the writer did
    events = [doc(o) for o in Harness().feed(*(starts[h.engine_run_id] for h in (root, child, leaf)))]
    assert [e["job"]["name"] for e in events] == ["a@1", "a@1.b@2", "a@1.b@2.c@3"]


def test_the_writer_normalizes_namespaces_and_refuses_impossible_ones() -> None:
    store = MemoryEventLogStore(partitions=2)
    writer = EventLogWriter(store, clock=lambda: T0)
    run = writer.run_started(namespace="commerce", workflow_type="a", workflow_version="1",
                             workflow_instance="i", task_id="t")  # fmt: skip
    run.dataset_input("k", "s3://données-brutes", "clients/日本.json")
    with pytest.raises(NamespaceError, match=re.escape("namespace: namespace 'file:///données' has 'é'")):
        run.dataset_output("k", "file:///données", "x")
    with pytest.raises(NamespaceError, match=r"^namespace: job namespace 'a=b' has '='"):
        writer.run_started(namespace="a=b", workflow_type="a", workflow_version="1", workflow_instance="i",
                           task_id="t")  # fmt: skip
    run.dataset_input("k", "kafka://b:9092;c:9092", "t")  # allowed in a dataset namespace
    with pytest.raises(NamespaceError, match=r"^namespace: "):
        writer.run_started(namespace="a b", workflow_type="a", workflow_version="1", workflow_instance="i",
                           task_id="t")  # fmt: skip
    with pytest.raises(ValueError, match=r"parent\.namespace"):
        writer.run_started(namespace="n", workflow_type="a", workflow_version="1", workflow_instance="i",
                           task_id="t", parent=RunRef("p", namespace="ü ü"))  # fmt: skip
    declared_ns = [
        r.dataset_namespace
        for r in (codec.decode(row.payload) for row in store.all_rows())
        if hasattr(r, "key")
    ]
    assert declared_ns == ["s3://xn--donnes-brutes-ehb", "kafka://b:9092;c:9092"]


def test_a_record_of_the_v2_schema_decodes_with_no_job_path() -> None:
    history = codec.schema_dir() / "history" / "RunStarted.v2.avsc"
    parsed = fastavro.parse_schema(json.loads(history.read_text(encoding="utf-8")), _write_hint=False)
    v2 = next(ws for ws in codec.known_writer_schemas().values() if ws.source == "history/RunStarted.v2.avsc")
    assert v2.fingerprint != codec.fingerprint_of("RunStarted") and parsed
    # the fingerprint of avro/RunStarted.avsc as released before v3 (CRC-64-AVRO f93830d2804014c0)
    assert v2.fingerprint == bytes.fromhex("f93830d2804014c0")[::-1]
    ref = {"engine_run_id": "p", "namespace": "n", "workflow_type": "a", "workflow_version": "1",
           "workflow_instance": "i", "start_time": T0}  # fmt: skip
    data = codec.encode_with(
        v2,
        {"partition": 1, "offset": 2, "append_time": T0, "engine_run_id": "c", "task_id": "t",
         "namespace": "n", "workflow_type": "b", "workflow_version": "2", "workflow_instance": "j",
         "principal": None, "start_time": T0, "nominal_start_time": None, "nominal_end_time": None,
         "parent": ref, "root": ref,
         "supersedes": None},
    )  # fmt: skip
    record = codec.decode(data)
    assert isinstance(record, RunStarted) and record.parent is not None and record.parent.job_name is None
    # the worker still names it: its parent is also its root
    (o,) = Harness().feed(record)
    assert doc(o)["job"]["name"] == "a@1.b@2"


def test_the_current_schema_round_trips_the_job_path() -> None:
    record = started("c", parent=replace(ref_of(started("p")), job_name="x@1.y@2"))
    assert codec.decode(codec.encode(record)) == record


def test_the_writer_claims_no_path_for_a_child_of_an_incomplete_reference() -> None:
    writer = EventLogWriter(MemoryEventLogStore(partitions=2), clock=lambda: T0)
    child = writer.run_started(namespace="n", workflow_type="b", workflow_version="2", workflow_instance="j",
                               task_id="t", parent=RunRef("p", job_name="a@1"))  # fmt: skip
    assert child.ref.job_name is None  # the worker may name it as a root: it must not be contradicted
    (row,) = writer.store.all_rows()  # type: ignore[attr-defined]
    record = codec.decode(row.payload, row.partition, row.offset)
    h = Harness()
    (o,) = h.feed(record)  # the record the writer wrote, its parent not visible
    assert doc(o)["job"]["name"] == "b@2" and "parent" not in doc(o)["run"]["facets"]
    assert h.steps[0].parent_not_visible
    wrong = replace(ref_of(started("p", wtype="m")), job_name="a@1.x@9")
    with pytest.raises(ValueError, match=r"parent\.job_name 'a@1\.x@9' does not end with the run's own 'm@3"):
        writer.run_started(namespace="n", workflow_type="b", workflow_version="2", workflow_instance="j",
                           task_id="t", parent=wrong)  # fmt: skip


def test_a_path_on_record_that_does_not_fit_its_run_is_not_used() -> None:
    parent = started("p", wtype="mid", instance="p", partition=0)
    child = started("c", wtype="leaf", instance="c", offset=3, parent=path_ref(parent, "a@1.other@2"))
    h = Harness()
    p_out, c_out = h.feed(parent, child)  # visible: the parent's own state decides
    assert doc(c_out)["job"]["name"] == "mid@3.leaf@3"
    assert doc(c_out)["run"]["facets"]["parent"]["job"]["name"] == doc(p_out)["job"]["name"]
    (alone,) = Harness().feed(child)  # not visible: no edge rather than the wrong path
    assert doc(alone)["job"]["name"] == "leaf@3" and "parent" not in doc(alone)["run"]["facets"]


@pytest.mark.parametrize("prefix", ["", "prod."])
def test_a_visible_parent_stored_without_a_path_is_extended_by_its_emitted_name(prefix: str) -> None:
    """States stored by the previous version (or in flat mode) have no path: the child extends the
    name the parent's events carried, so the parent facet and the child's name agree."""
    cfg = MappingConfig(job_prefix=prefix)
    grand = started("g", wtype="daily", instance="g", partition=2)
    parent = started("p", wtype="mid", instance="p", partition=0, parent=ref_of(grand))
    old = Harness(MappingConfig(job_prefix=prefix, job_names="flat"))
    (p_out,) = old.feed(parent)
    raw = json.loads(dumps_state(old.state("p")))
    del raw["path"]
    h = Harness(cfg)
    h.table[state_key(0, "p")] = loads_state(json.dumps(raw).encode())
    for ref in (RunRef("p"), ref_of(parent)):  # id only, and complete without a path
        (c_out,) = h.feed(started("c" + str(len(h.steps)), wtype="leaf", instance="c", offset=5, parent=ref))
        facet = doc(c_out)["run"]["facets"]["parent"]
        assert facet["job"]["name"] == doc(p_out)["job"]["name"] == f"{prefix}mid@3"
        assert doc(c_out)["job"]["name"] == f"{prefix}mid@3.leaf@3"


def test_the_writer_and_the_worker_share_the_rule_for_a_parent_named_as_root() -> None:
    """A complete reference without a path that the record also names as the root: both sides take
    the parent's segment as its path (one function, `naming.parent_path_on_record`)."""
    store = MemoryEventLogStore(partitions=4)
    writer = EventLogWriter(store, clock=lambda: T0)
    ref = RunRef("p", "n", "a", "1", "i", T0)  # a v2-style reference: no job_name
    child = writer.run_started(namespace="n", workflow_type="b", workflow_version="2", workflow_instance="j",
                               task_id="t", parent=ref, root=ref)  # fmt: skip
    grandchild = writer.run_started(namespace="n", workflow_type="c", workflow_version="3",
                                    workflow_instance="k", task_id="t", parent=child)  # fmt: skip
    assert (child.ref.job_name, grandchild.ref.job_name) == ("a@1.b@2", "a@1.b@2.c@3")
    records = [codec.decode(r.payload, r.partition, r.offset) for r in store.all_rows()]
    starts = {r.engine_run_id: r for r in records if isinstance(r, RunStarted)}
    names = {rid: doc(Harness().feed(r)[0])["job"]["name"] for rid, r in starts.items()}  # each alone
    assert names[child.engine_run_id] == "a@1.b@2" and names[grandchild.engine_run_id] == "a@1.b@2.c@3"


@pytest.mark.parametrize(
    ("namespace", "uri"),
    [
        ("postgres://db:5432", "postgres://db:5432"),  # an absolute URI is its own
        ("s3://xn--donnes-brutes-ehb", "s3://xn--donnes-brutes-ehb"),
        ("kafka://broker:9092", "kafka://broker:9092"),
        ("snowflake://org-account", "snowflake://org-account"),
        ("hdfs://nn:8020/warehouse", "hdfs://nn:8020/warehouse"),
        ("file", "file:///"),  # RFC 8089: the local file system
        ("bigquery", "bigquery:///"),
        ("warehouse", "warehouse:///"),
        ("my_lake", "urn:olstream:namespace:my_lake"),  # "_" cannot be in a scheme
        ("team@data=1;x", "urn:olstream:namespace:team@data=1;x"),
        ("s3://", "urn:olstream:namespace:s3://"),  # java.net.URI refuses an empty authority
        ("bigquery:", "urn:olstream:namespace:bigquery:"),  # and nothing after the scheme
        ("kafka://host:port", "urn:olstream:namespace:kafka://host:port"),  # a port is digits
        ("a b%", "urn:olstream:namespace:a%20b%25"),
    ],
)
def test_every_namespace_has_a_source_uri_that_is_an_absolute_uri(namespace: str, uri: str) -> None:
    from jsonschema import Draft202012Validator

    assert source_uri(namespace) == uri
    assert is_absolute_uri(uri)
    assert Draft202012Validator.FORMAT_CHECKER.conforms(uri, "uri"), uri  # the spec's `format: uri`


def test_the_absolute_uri_check_refuses_what_is_not_one() -> None:
    for text in ("bigquery", "", "//host", "1abc:x", "a b:c", "s3://", "bigquery:", "x:a b", "k://h:p"):
        assert not is_absolute_uri(text), text
