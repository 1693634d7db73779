"""RUNNING events: one per declaration that adds a dataset to an open run, decided by the log alone."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from olstream.cli.main import build_parser
from olstream.contract.records import Direction, RunRef, RunStatus
from olstream.shared.errors import ConfigError
from olstream.streams.mapping import MappingConfig, canonical_bytes
from olstream.streams.settings import resolve_worker_settings
from olstream.streams.state import StreamInputError, format_time
from olstream.streams.state_store import dumps_state, loads_state
from tests.support.cli_settings import build_settings
from tests.support.openlineage_schema import validator
from tests.support.stream_records import T0, Harness, declared, doc, ended, ref_of, started

ON = MappingConfig(running_events=True)


def _types(outs: list) -> list[str]:  # type: ignore[type-arg]
    return [o.event_type for o in outs]


def test_off_by_default_emits_start_and_terminal_only() -> None:
    assert not MappingConfig().running_events
    outs = Harness().feed(started(), declared(offset=1), ended(offset=2))
    assert _types(outs) == ["START", "COMPLETE"]


def test_each_new_dataset_gets_one_running_event_with_only_that_dataset() -> None:
    h = Harness(ON)
    outs = h.feed(
        started(),
        declared(offset=1, name="a", version="v1"),
        declared(offset=2, direction=Direction.OUTPUT, ns="s3://lake", name="b"),
        declared(offset=3, name="a", version="v2"),  # a repeat: no event
        declared(offset=4, name="c"),
        ended(offset=5),
    )
    assert _types(outs) == ["START", "RUNNING", "RUNNING", "RUNNING", "COMPLETE"]
    start, r1, r2, r3, complete = (doc(o) for o in outs)
    assert [d["name"] for d in r1["inputs"]] == ["a"] and r1["outputs"] == []
    assert r1["inputs"][0]["facets"]["version"]["datasetVersion"] == "v1"
    assert r1["inputs"][0]["facets"]["dataSource"]["name"] == "postgres://db:5432"
    assert r2["inputs"] == [] and [(d["namespace"], d["name"]) for d in r2["outputs"]] == [("s3://lake", "b")]
    assert [d["name"] for d in r3["inputs"]] == ["c"]
    assert [d["name"] for d in complete["inputs"]] == ["a", "c"]
    assert [d["name"] for d in complete["outputs"]] == ["b"]
    for running, record_offset in ((r1, 1), (r2, 2), (r3, 4)):
        # the run's facets as on its START, and the declaration's time in the workflow facet
        workflow = running["run"]["facets"]["workflow"]
        assert workflow.pop("declaredAt") == format_time(T0 + timedelta(seconds=record_offset))
        assert running["run"] == start["run"]
        assert running["job"] == start["job"]
        # eventTime is the run's start ("running since"): Marquez sets a run's start from it
        assert running["eventTime"] == start["eventTime"] == format_time(T0)
    assert "declaredAt" not in start["run"]["facets"]["workflow"]
    assert "declaredAt" not in complete["run"]["facets"]["workflow"]
    assert [o.event_time for o in outs] == [o_doc["eventTime"] for o_doc in (start, r1, r2, r3, complete)]
    assert {o.key for o in outs} == {outs[0].key} and {o.run_id for o in outs} == {outs[0].run_id}


def test_running_events_of_a_child_carry_its_parent_facet_and_validate_against_the_spec() -> None:
    root = started("root", nominal=True)
    child = started("child", wtype="leaf", offset=1, parent=ref_of(root))
    outs = Harness(ON).feed(
        root,
        child,
        declared("child", offset=2, name="日本語.テーブル", version="v9"),
        declared("child", offset=3, direction=Direction.OUTPUT, ns="s3://b", name="k/ä.parquet"),
        ended("child", offset=4, status=RunStatus.FAILED),
    )
    assert _types(outs) == ["START", "START", "RUNNING", "RUNNING", "FAIL"]
    v = validator()
    for o in outs:
        v.validate(o.value)
    assert "parent" in doc(outs[2])["run"]["facets"]
    assert "status" not in doc(outs[2])["run"]["facets"]["workflow"]


def test_a_replayed_declaration_resends_its_identical_running_event_while_the_run_is_open() -> None:
    h = Harness(ON)
    first = h.feed(started(), declared(offset=1, name="a"), declared(offset=2, name="a"), declared(offset=3))
    assert _types(first) == ["START", "RUNNING", "RUNNING"]
    assert [o.value for o in h.feed(declared(offset=1, name="a"))] == [first[1].value]
    assert h.steps[-1].replay and h.steps[-1].write is None
    assert h.feed(declared(offset=2, name="a")) == []  # the repeat added nothing, so its replay neither
    assert [o.value for o in h.feed(declared(offset=3))] == [first[2].value]


def test_after_the_end_a_replayed_declaration_sends_nothing_and_a_new_one_is_an_error() -> None:
    h = Harness(ON)
    outs = h.feed(started(), declared(offset=1, name="a"), ended(offset=2))
    assert _types(outs) == ["START", "RUNNING", "COMPLETE"]
    assert h.feed(declared(offset=1, name="a")) == [] and h.steps[-1].replay
    with pytest.raises(StreamInputError) as e:
        h.feed(declared(offset=3, name="b"))
    assert e.value.reason == "declaration_after_end"


def test_a_replayed_run_ends_on_its_terminal_event() -> None:
    """The state-covered replay (run states written, mark not): the repeats keep the order."""
    h = Harness(ON)
    records = [started(), declared(offset=1, name="a"), declared(offset=2, name="b"), ended(offset=3)]
    first = h.feed(*records)
    again = h.feed(*records)
    assert _types(first) == ["START", "RUNNING", "RUNNING", "COMPLETE"]
    assert _types(again) == ["COMPLETE"]  # START and RUNNING are never re-sent after the end


def test_bytes_depend_on_the_records_only() -> None:
    records = [
        started(),
        declared(offset=1, name="a", version="1"),
        declared(offset=2, name="b"),
        ended(offset=3),
    ]
    a, b = Harness(ON), Harness(ON)
    outs_a = a.feed(*records)
    outs_b = [o for r in records for o in b.feed(r)]  # one record at a time: no batch in the bytes
    assert [o.value for o in outs_a] == [o.value for o in outs_b]


def test_a_running_events_size_does_not_grow_with_the_datasets_declared_before() -> None:
    n = 2000
    records = [started(), *(declared(offset=i, name=f"table_{i:05d}") for i in range(1, n + 1))]
    outs = Harness(ON).feed(*records)
    running = [o for o in outs if o.event_type == "RUNNING"]
    assert len(running) == n
    assert len({len(o.value) for o in running}) == 1


def test_declared_at_survives_the_stored_form_and_old_states_load() -> None:
    h = Harness(ON)
    h.feed(started(), declared(offset=7, name="a"))
    s = h.state("r1")
    assert s.inputs[0].declared_at == 7
    assert loads_state(dumps_state(s)) == s
    old = json.loads(dumps_state(s))
    old["in"] = [x[:3] for x in old["in"]]  # a state stored before `declared_at`
    loaded = loads_state(json.dumps(old).encode())
    assert loaded.inputs[0].declared_at == -1
    assert Harness(ON).cfg.running_events and loaded.inputs[0].name == "a"


def test_a_child_that_only_references_its_parent_gets_running_events_too() -> None:
    outs = Harness(ON).feed(started("p"), started("c", offset=1, parent=RunRef("p")), declared("c", offset=2))
    assert _types(outs) == ["START", "START", "RUNNING"]


def test_the_setting_from_flag_env_and_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OLSTREAM_WORKER_RUNNING_EVENTS", raising=False)
    parse = build_parser().parse_args
    assert not build_settings(parse(["worker"])).mapping.running_events
    assert build_settings(parse(["worker", "--running-events", "on"])).mapping.running_events
    path = tmp_path / "olstream.yml"
    path.write_text("worker:\n  running_events: 'on'\n")
    settings, resolved = resolve_worker_settings({"config": str(path)}, {})
    assert settings.mapping.running_events and resolved.origins["running_events"] == f"file {path}"
    settings, _ = resolve_worker_settings({"config": str(path)}, {"OLSTREAM_WORKER_RUNNING_EVENTS": "off"})
    assert not settings.mapping.running_events
    monkeypatch.setenv("OLSTREAM_WORKER_RUNNING_EVENTS", "on")
    assert build_settings(parse(["worker"])).mapping.running_events
    assert not build_settings(parse(["worker", "--running-events", "off"])).mapping.running_events
    monkeypatch.setenv("OLSTREAM_WORKER_RUNNING_EVENTS", "sometimes")
    with pytest.raises(ConfigError, match="running events must be one of on, off"):
        build_settings(parse(["worker"]))


def test_running_bytes_are_the_canonical_form_of_their_own_document() -> None:
    odd = 'q"\\ü\u2028\x01☃'
    cfg = MappingConfig(running_events=True, producer=f"https://p/{odd}", job_prefix=odd)
    outs = Harness(cfg).feed(
        started(wtype=odd, instance=odd, nominal=True, principal=odd),
        declared(offset=1, ns="s3://bucket", name=odd, version=odd),
        declared(offset=2, direction=Direction.OUTPUT, ns="file", name=odd),
    )
    assert _types(outs) == ["START", "RUNNING", "RUNNING"]
    for o in outs:
        assert canonical_bytes(json.loads(o.value)) == o.value
    assert doc(outs[1])["inputs"][0]["name"] == odd
