"""Fuzzing the mapping: random but schema-valid record sequences, through the codec, into `apply`.

Each record goes through encode and decode first, as the worker receives it: one with a time a
record cannot carry stops at decode (InvalidTimeError). The rest are applied in order, like the
worker's agent: only OlstreamError subclasses may be raised (the agent sends those records to its
errors topic and goes on); every event is valid JSON in canonical form; every stored state
survives its stored form.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections import defaultdict
from datetime import UTC, datetime
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from olstream.contract import codec
from olstream.contract.records import Direction, Record, RunError, RunRef, RunStarted, RunStatus
from olstream.contract.times import record_time_problems
from olstream.shared.errors import InvalidTimeError, OlstreamError
from olstream.streams.mapping import MappingConfig, canonical_bytes
from olstream.streams.state_store import dumps_state, loads_state, state_document
from tests.support.stream_records import Harness, declared, ended, path_ref, ref_of, started

FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
T = TypeVar("T")
CONFIGS = [MappingConfig(), MappingConfig(job_names="flat"), MappingConfig(job_prefix="prod.")]


def mostly(good: st.SearchStrategy[T], bad: st.SearchStrategy[T], odds: int = 4) -> st.SearchStrategy[T]:
    """`good` `odds` times to `bad`'s once, so that runs get far (one_of's choice is not uniform)."""
    return st.integers(0, odds).flatmap(lambda i: bad if i == odds else good)


weird = st.one_of(
    st.text(max_size=10),
    st.text(st.characters(codec="utf-8"), min_size=200, max_size=1000),
    st.sampled_from(["", " ", "\x00", "\n\t\x1f", "\u202e", "🚀🚀", "a.b@c", "@", ".", "é" * 100]),
)
names = mostly(st.sampled_from(["ingest", "enrich", "etl", "t@1", "a.b", "日本"]), weird)
versions = mostly(st.sampled_from(["1", "2.0", "3"]), weird)
# valid namespaces (a non-ASCII host is rewritten in its IDNA form), else anything (mostly refused)
namespaces = mostly(st.sampled_from(["acme", "prod", "team_a:etl", "https://bücher.example/x"]), weird)
dataset_namespaces = mostly(
    st.sampled_from(["postgres://db:5432", "s3://bucket", "file", "postgres://bücher.example:5432"]), weird
)
texts = mostly(st.text(max_size=20), weird)
maybe = st.none() | texts
run_ids = mostly(st.sampled_from(["r0", "r1", "r2", "r3"]), weird)
times = mostly(
    st.datetimes(datetime(2000, 1, 1), datetime(2100, 1, 1), timezones=st.just(UTC)),
    st.one_of(
        st.datetimes(timezones=st.just(UTC)),  # any year: before 1970 is refused at decode
        st.sampled_from([datetime(1970, 1, 1, tzinfo=UTC), datetime.max.replace(tzinfo=UTC)]),
    ),
    odds=12,
)


@st.composite
def refs(draw: st.DrawFn, earlier: list[RunStarted]) -> RunRef | None:
    """None, a reference to an earlier start (full, with a job path, or its id only), or a random one."""
    kind = draw(st.sampled_from(["none", "full", "path", "id", "random"] if earlier else ["none", "random"]))
    if kind == "none":
        return None
    if kind == "random":
        ns, wtype, version, instance = (draw(st.none() | s) for s in (namespaces, names, versions, names))
        return RunRef(draw(run_ids), ns, wtype, version, instance, draw(st.none() | times), draw(maybe))
    other = draw(st.sampled_from(earlier))
    if kind == "full":
        return ref_of(other)
    if kind == "path":
        return path_ref(
            other, draw(st.sampled_from([f"{other.workflow_type}@{other.workflow_version}"]) | weird)
        )
    return RunRef(other.engine_run_id)


@st.composite
def sequences(draw: st.DrawFn) -> list[Record]:
    """Records of a few log partitions with dense offsets, some of them delivered again (replays)."""
    out: list[Record] = []
    starts: list[RunStarted] = []
    next_offset: dict[int, int] = defaultdict(int)
    for _ in range(draw(st.integers(1, 20))):
        kind = draw(st.sampled_from(["start", "start", "declare", "declare", "end", "replay"]))
        if kind == "replay" and out:
            out.append(draw(st.sampled_from(out)))
            continue
        if kind != "start" and starts and draw(st.integers(0, 9)) > 0:  # mostly: a run that started
            earlier = draw(st.sampled_from(starts))
            partition, rid = earlier.partition, earlier.engine_run_id
        else:
            partition, rid = draw(st.integers(0, 2)), draw(run_ids)
        offset = next_offset[partition]
        next_offset[partition] += 1
        record: Record
        if kind == "start":
            parent, root = draw(refs(starts)), draw(refs(starts))
            record = started(
                rid,
                offset=offset,
                partition=partition,
                namespace=draw(namespaces),
                wtype=draw(names),
                version=draw(versions),
                instance=draw(names),
                parent=parent,
                root=root,
                principal=draw(maybe),
                start=draw(times),
                supersedes=draw(maybe),
            )
            record = dataclasses.replace(
                record,
                append_time=draw(times),
                task_id=draw(texts),
                nominal_start_time=draw(st.none() | times),
                nominal_end_time=draw(st.none() | times),
            )
            starts.append(record)
        elif kind == "declare":
            record = declared(
                rid,
                offset=offset,
                partition=partition,
                direction=draw(st.sampled_from(Direction)),
                ns=draw(dataset_namespaces),
                name=draw(names),
                version=draw(maybe),
                at=draw(times),
            )
            record = dataclasses.replace(record, key=draw(texts), append_time=draw(times))
        else:
            error = draw(st.none() | st.builds(RunError, texts, maybe, maybe))
            record = ended(
                rid,
                offset=offset,
                partition=partition,
                status=draw(st.sampled_from(RunStatus)),
                error=error,
                at=draw(times),
            )
        out.append(record)
    return out


def _received(record: Record) -> Record | None:
    """The record as the worker decodes it; None when a time is out of range (refused at decode)."""
    data = codec.encode(record)
    try:
        decoded = codec.decode(data, record.partition, record.offset)
    except InvalidTimeError as e:
        assert record_time_problems(record)[0][0] == e.field
        return None
    assert decoded == record and record_time_problems(record) == []
    return decoded


@FUZZ
@given(sequences(), st.sampled_from(CONFIGS))
def test_random_sequences_raise_only_olstream_errors_and_emit_valid_json(
    records: list[Record], cfg: MappingConfig
) -> None:
    h = Harness(cfg)
    for record in records:
        decoded = _received(record)
        if decoded is None:
            continue
        try:
            outputs = h.feed(decoded)
        except OlstreamError:
            continue  # the agent sends the record to its errors topic and goes on
        step = h.steps[-1]
        for o in outputs:
            doc = json.loads(o.value.decode("utf-8"))
            assert canonical_bytes(doc) == o.value
            assert doc["eventType"] == o.event_type
            assert o.key.decode("utf-8").startswith("run:")
        if step.write is not None:
            assert dumps_state(step.write) == canonical_bytes(state_document(step.write))
            stored = loads_state(dumps_state(step.write))
            assert stored == step.write
            h.table[step.key] = stored  # the worker's table holds the stored form


AT = datetime(2026, 1, 2, tzinfo=UTC)


# Found by the fuzzing above: `state._identity_from_ref` asserted a non-empty workflow_type.
@pytest.mark.parametrize(
    ("cfg", "parent", "root"),
    [
        (CONFIGS[1], RunRef("p", "acme", "", "1", "i", AT), None),
        (CONFIGS[1], RunRef("p", "acme", "w", "1", "i", AT), RunRef("r", "acme", "", "1", "i", AT)),
        (CONFIGS[0], RunRef("p", "acme", "", "1", "i", AT, "@1"), None),
        (CONFIGS[0], RunRef("p", "acme", "w", "1", "i", AT, "w@1"), RunRef("r", "acme", "", "1", "i", AT)),
    ],
)
def test_a_reference_with_an_empty_workflow_type_raises_only_an_olstream_error(
    cfg: MappingConfig, parent: RunRef, root: RunRef | None
) -> None:
    record = _received(RunStarted(0, 0, AT, "c", "t", "acme", "w", "1", "i", AT, parent=parent, root=root))
    assert record is not None
    with contextlib.suppress(OlstreamError):  # refused: fine; an AssertionError was not
        Harness(cfg).feed(record)
