"""`olstream explain`'s pure parts: the cheap filters and what they keep, the state's reading, the
views and their renderings (secrets redacted), and the command's bad usage."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from olstream.cli.main import main
from olstream.contract import codec, wire
from olstream.contract.records import Record
from olstream.eventlog.stores import open_store
from olstream.eventlog.writer import partition_for
from olstream.operations.explain import ol_uuid
from olstream.operations.explain_log import add_log_rows, runs_only_in_log
from olstream.operations.explain_match import (
    EventFinder,
    RunFinder,
    StateFinder,
    avro_string,
    event_field,
    events_partition,
    murmur2,
    ol_run_id,
    workflow_facet,
)
from olstream.operations.explain_read import ScanCost
from olstream.operations.explain_report import ExplainReport, Place
from olstream.operations.explain_runs import RunsFound, dead_letter_view, event_view, state_view
from olstream.shared import deadletter
from olstream.streams.framed_input import InputFraming
from olstream.streams.state_store import dumps_state
from tests.support.fake_message import FakeMessage
from tests.support.stream_records import Harness, declared, ended, started

NO_REGISTRY = InputFraming(None)  # the values here are single-object: nothing to resolve


def msg(
    value: bytes | None,
    partition: int = 0,
    offset: int = 0,
    headers: list[tuple[str, bytes]] | None = None,
    key: bytes | None = None,
    ts: int = 1_000,
) -> FakeMessage:
    return FakeMessage(partition, offset, key=key, value=value, headers=headers, timestamp_ms=ts)


def feed(finder: Any, records: list[Record]) -> None:
    for i, r in enumerate(records):
        finder.offer(msg(codec.encode(r), offset=i))


def test_avro_string_is_the_bytes_a_record_body_holds() -> None:
    body = codec.encode(started("run-ü-7"))
    assert avro_string("run-ü-7") in body
    assert avro_string("run-ü-") not in body  # the length prefix tells a prefix from the whole
    assert avro_string("x" * 100)[:2] == bytes([0xC8, 0x01])  # 200 as a varint


def test_a_finder_keeps_the_records_of_an_engine_run_id_and_decodes_nothing_else() -> None:
    finder = RunFinder(NO_REGISTRY, engine_run_ids=frozenset({"r1"}))
    feed(
        finder,
        [
            started("r1"),
            started("r2", offset=1),
            declared("r1", offset=2),
            declared("r2", offset=3, name="r1"),  # the needle in another field: decoded, not kept
            ended("r1", offset=4),
        ],
    )
    found = finder.found()
    assert list(found) == [(0, "r1")]
    assert [type(f.record).__name__ for f in found[(0, "r1")]] == [
        "RunStarted",
        "DatasetDeclared",
        "RunEnded",
    ]
    assert finder.starts_seen == 1


def test_a_finder_keeps_a_run_whose_start_it_did_not_see() -> None:
    finder = RunFinder(NO_REGISTRY, engine_run_ids=frozenset({"r1"}))
    feed(finder, [declared("r1", offset=2), ended("r1", offset=4)])
    assert [f.offset for f in finder.found()[(0, "r1")]] == [0, 1]


def test_a_finder_by_instance_follows_each_run_and_keeps_the_latest_max_runs() -> None:
    finder = RunFinder(NO_REGISTRY, instance="daily", max_runs=2)
    records: list[Record] = []
    for i in range(3):
        records += [started(f"r{i}", offset=3 * i, instance="daily"), ended(f"r{i}", offset=3 * i + 2)]
    records += [started("other", offset=20, instance="weekly"), ended("other", offset=21)]
    feed(finder, records)
    found = finder.found()
    assert list(found) == [(0, "r1"), (0, "r2")]  # the oldest, r0, dropped
    assert all(len(v) == 2 for v in found.values())
    assert finder.starts_seen == 3


def test_a_finder_by_openlineage_run_id_derives_the_id_of_every_start() -> None:
    target = started("r9", offset=5, instance="i9")
    finder = RunFinder(NO_REGISTRY, run_ids=frozenset({ol_run_id(target)}))
    feed(finder, [started("r1"), target, ended("r9", offset=6)])
    assert list(finder.found()) == [(0, "r9")]
    # the same run id as the worker's state holds
    processor = Harness()
    processor.feed(target)
    assert processor.state("r9").run.run_id == ol_run_id(target)


def test_runs_found_are_ordered_by_time_and_cut_to_the_latest() -> None:
    finder = RunFinder(NO_REGISTRY, engine_run_ids=frozenset({"a", "b"}))
    finder.offer(msg(codec.encode(started("b", partition=0)), offset=1, ts=200))
    finder.offer(msg(codec.encode(started("a", partition=0, offset=1)), offset=0, ts=100))
    runs = RunsFound.of([finder])
    assert [r.key[1] for r in runs.runs] == ["a", "b"]
    assert [r.key[1] for r in runs.cut(1).runs] == ["b"] and runs.cut(1).matched == 2
    assert runs.first_ms == 100


def _event(run_id: str, event_type: str = "START", parent: str | None = None) -> bytes:
    facets: dict[str, Any] = {"workflow": {"engineRunId": "e1", "workflowInstance": "i1"}}
    if parent:
        facets["parent"] = {"run": {"runId": parent}}
    doc = {
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "eventType": event_type,
        "run": {"runId": run_id, "facets": facets},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def test_an_event_finder_confirms_by_header_or_by_the_payload_when_a_copy_has_none() -> None:
    rid, child = "0190a0a0-0000-7000-8000-000000000001", "0190a0a0-0000-7000-8000-000000000002"
    finder = EventFinder(frozenset({rid}))
    finder.offer(msg(_event(rid), headers=[(wire.HEADER_RUN_ID, rid.encode())]))
    finder.offer(msg(_event(child, parent=rid), offset=1, headers=[(wire.HEADER_RUN_ID, child.encode())]))
    finder.offer(msg(_event(rid, "COMPLETE"), offset=2))  # a DLQ copy without the header
    finder.offer(msg(_event(child, parent=rid), offset=3))  # its parent's id in its payload only
    finder.offer(msg(None, offset=4))
    spaced = json.dumps(json.loads(_event(rid, "COMPLETE")), indent=1).encode()  # another producer's layout
    finder.offer(msg(spaced, offset=5))
    finder.offer(msg(json.dumps(json.loads(_event(child, parent=rid)), indent=1).encode(), offset=6))
    assert [(r, f.offset) for r, f in finder.kept] == [(rid, 0), (rid, 2), (rid, 5)]
    assert event_field(_event(rid), "run", "runId") == rid
    assert event_field(b"not json", "run") is None
    assert workflow_facet(_event(rid))["engineRunId"] == "e1" and workflow_facet(b"{}") == {}


def test_a_state_finder_keeps_the_last_write_of_each_key() -> None:
    finder = StateFinder(frozenset({b"0:r1"}))
    finder.offer(msg(b"one", key=b"0:r1"))
    finder.offer(msg(b"x", offset=1, key=b"1:r1"))
    finder.offer(msg(None, offset=2, key=b"0:r1"))
    assert finder.last[b"0:r1"].offset == 2 and finder.last[b"0:r1"].value is None
    assert set(finder.last) == {b"0:r1"}


def test_the_state_reads_open_ended_evicted_or_absent() -> None:
    processor = Harness()
    processor.feed(started("r1"))
    opened = dumps_state(processor.state("r1"))
    processor.feed(ended("r1", offset=2))
    closed = dumps_state(processor.state("r1"))
    finder = StateFinder(frozenset({b"0:r1"}))
    views = []
    for value in (opened, closed, None):
        finder.offer(msg(value, key=b"0:r1"))
        views.append(state_view(finder.last[b"0:r1"], "app-runs-changelog", True))
    assert [v.status for v in views] == ["open", "ended", "evicted"]
    assert "completed at" in views[1].detail
    assert views[0].place == Place("app-runs-changelog", 0, 0, "1970-01-01T00:00:01.000Z")
    assert state_view(None, "c", False).status == "absent"
    assert "not applied" in state_view(None, "c", False).detail
    assert "refused" in state_view(None, "c", True).detail


def test_an_event_view_says_which_groups_committed_past_it_and_links_its_dlq_copies() -> None:
    rid = "0190a0a0-0000-7000-8000-000000000001"
    finder = EventFinder(frozenset({rid}))
    finder.offer(msg(_event(rid), partition=1, offset=5))
    event = finder.kept[0][1]
    copy = msg(
        _event(rid),
        headers=[
            (deadletter.ERROR, b"rejected"),
            (deadletter.HTTP_STATUS, b"400"),
            (deadletter.SOURCE_TOPIC, b"ev"),
            (deadletter.SOURCE_PARTITION, b"1"),
            (deadletter.SOURCE_OFFSET, b"5"),
        ],
    )
    dlq = EventFinder(frozenset({rid}))
    dlq.offer(copy)
    dead = dead_letter_view("ev.dlq", dlq.kept[0][1])
    assert (dead.reason, dead.http_status, dead.source) == ("rejected", "400", "ev[1]@5")
    view = event_view("ev", event, {"sink-a": {1: 6}, "sink-b": {1: 5}, "sink-c": {0: 9}}, [dead])
    assert (view.type, view.event_time) == ("START", "2026-01-01T00:00:00.000000Z")  # from the JSON
    assert [(g.group, g.committed, g.past) for g in view.groups] == [
        ("sink-a", 6, True),
        ("sink-b", 5, False),
        ("sink-c", None, False),
    ]
    assert view.dead_letters == (dead,)


def _report(**changes: Any) -> ExplainReport:
    processor = Harness()
    start = started("r1", namespace="postgres://admin:hunter2@db:5432")
    processor.feed(start)
    finder = RunFinder(NO_REGISTRY, engine_run_ids=frozenset({"r1"}))
    finder.offer(msg(codec.encode(start), ts=5_000))
    from olstream.operations.explain_runs import ExplainRequest, build_views

    request = ExplainRequest("r1", "auto", "rec", "ev", ("ev.dlq",), "app", None, 10, 600.0, 2, 10.0)
    runs = RunsFound.of([finder])
    state = StateFinder(frozenset({b"0:r1"}))
    state.offer(msg(dumps_state(processor.state("r1")), key=b"0:r1"))
    states = {(0, "r1"): state.last[b"0:r1"]}
    views = build_views(request, runs, states, runs.run_ids(states), [], [], {0: 1}, {})
    base = ExplainReport(
        "r1", "engine run id", tuple(views), 1, (), (ScanCost("rec", 2, 10, 0.5, None),), 0.6
    )
    return replace(base, **changes)


def test_the_report_renders_as_lines_and_json_with_secrets_redacted() -> None:
    report = _report()
    text = "\n".join(report.lines())
    assert "hunter2" not in text and "hunter2" not in report.to_json()
    assert "RunStarted" in text and "rec[0]@0" in text and "worker committed past it" in text
    assert "worker state: open" in text
    assert "read rec: 2 partitions, 10 messages, 0.50 s" in text
    doc = json.loads(report.to_json())
    assert doc["runs"][0]["records"][0]["kafka"] == {
        "topic": "rec",
        "partition": 0,
        "offset": 0,
        "time": "1970-01-01T00:00:05.000Z",
    }
    assert doc["runs"][0]["job"].startswith("postgres://")
    many = "\n".join(_report(runs_matched=3).lines())
    assert "1 of 3 runs, the latest; raise --max-runs" in many


def test_a_uuid_is_recognised_in_any_case() -> None:
    assert ol_uuid(" 0190A0A0-0000-7000-8000-000000000001 ") == "0190a0a0-0000-7000-8000-000000000001"
    assert ol_uuid("run-1") is None


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["explain", "r1", "--max-runs", "0"], "max_runs"),
        (["explain", "r1", "--time-slack", "-1"], "time_slack"),
        (["explain", "r1", "--sink-groups", " , "], "sink_groups"),
        (
            ["explain", "not-a-uuid", "--kind", "run-id", "--bootstrap", "127.0.0.1:1"],
            "not an OpenLineage run id",
        ),
        (["explain", "r1", "--bootstrap", "127.0.0.1:1", "--wait", "0.5"], "did not answer"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1, err


def test_print_config_names_every_setting_and_hides_the_sasl_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        main(["explain", "r1", "--print-config", "--kafka-sasl-password", "s3cret", "--sink-groups", "a,b"])
        == 0
    )
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert doc["sink_groups"] == ["a", "b"] and doc["max_runs"] == 10 and doc["app_id"] == "olstream-stream"
    assert "s3cret" not in out


def _log(tmp_path: Path, records: list[Record]) -> str:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    store = open_store(url, partitions=2, create=True)
    try:
        for r in records:
            assert store.append(r.partition, codec.offset_encoder(r)) == r.offset
    finally:
        store.close()
    return url


def test_the_event_log_adds_the_rows_the_records_topic_lacks_and_finds_runs_only_it_holds(
    tmp_path: Path,
) -> None:
    # the writer puts every run of an instance in one log partition: here 0
    daily = next(name for name in (f"daily-{i}" for i in range(10)) if partition_for(name, 2) == 0)
    records: list[Record] = [
        started("r1", instance=daily),
        declared("r1", offset=1),
        ended("r1", offset=2),
        started("r2", offset=3, instance=daily),
    ]
    url = _log(tmp_path, records)
    # the records topic held r1's start only
    [view] = _report().runs
    notes: list[str] = []
    [more] = add_log_rows(url, [view], notes, NO_REGISTRY)
    assert [(r.type, r.log_offset, r.kafka is None) for r in more.records] == [
        ("RunStarted", 0, False),
        ("DatasetDeclared", 1, True),
        ("RunEnded", 2, True),
    ]
    assert notes == ["read the event log: 1 partitions, 4 rows"]
    only = runs_only_in_log(url, daily, "instance", 10, NO_REGISTRY)
    assert [(v.engine_run_id, len(v.records), v.state.status) for v in only] == [
        ("r1", 3, "absent"),
        ("r2", 1, "absent"),
    ]
    assert "not in the records topic" in only[0].state.detail
    assert [v.engine_run_id for v in runs_only_in_log(url, daily, "auto", 1, NO_REGISTRY)] == ["r2"]
    assert runs_only_in_log(url, "nobody", "engine-run-id", 10, NO_REGISTRY) == []


@pytest.mark.parametrize(
    ("key", "expected"),
    [  # Kafka's UtilsTest vectors for Utils.murmur2
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        ("abc", 479470107),
        ("1", -1993445489),
        ("12", 126087238),
    ],
)
def test_murmur2_is_kafkas(key: str, expected: int) -> None:
    assert murmur2(key.encode()) == expected
    assert events_partition(key.encode(), 6) == (expected & 0x7FFFFFFF) % 6


def test_an_event_finder_by_engine_run_id_covers_the_runs_it_finds() -> None:
    rid, other = "0190a0a0-0000-7000-8000-000000000001", "0190a0a0-0000-7000-8000-000000000009"
    finder = EventFinder(frozenset({"0190a0a0-0000-7000-8000-00000000000f"}), frozenset({"e1"}))
    finder.offer(msg(_event(rid), headers=[(wire.HEADER_RUN_ID, rid.encode())]))  # its facet names e1
    finder.offer(msg(_event(other).replace(b'"e1"', b'"e2"'), offset=1))
    assert [r for r, _ in finder.kept] == [rid] and rid in finder.covered and other not in finder.covered
    merged = EventFinder(frozenset()).merge([finder, finder.only({rid})])
    assert [r for r, _ in merged.kept] == [rid, rid] and rid in merged.covered
    assert finder.only({other}).kept == []
