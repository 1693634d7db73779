"""The range of times a record carries, the list of time fields, and the checks of both."""

from __future__ import annotations

import dataclasses
import io
import json
import typing
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from typing import Any

import fastavro
import pytest

from olstream.contract import codec
from olstream.contract.records import RECORD_TYPES, Record, RunRef, RunStarted
from olstream.contract.times import (
    DECODED_TIMES_OK,
    EARLIEST,
    LATEST,
    LATEST_MICROS,
    TIME_FIELDS,
    UUID7_MILLIS_LIMIT,
    micros_problem,
    raw_time_problems,
    record_time_problems,
    time_problem,
)
from olstream.shared.errors import DecodeError, InvalidTimeError
from olstream.streams.runid import run_id, timestamp_millis
from tests.support.stream_records import T0, declared, ended, started

MICRO = timedelta(microseconds=1)


class _NoOffset(tzinfo):
    """A tzinfo that knows no offset: its datetimes are naive in effect."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str | None:
        return None

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None


class _BadOffset(_NoOffset):
    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return "soon"  # type: ignore[return-value]


def _timestamp_paths(schema: Any, named: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of the timestamp-micros fields of an Avro record schema (JSON form)."""
    if isinstance(schema, list):
        return [p for branch in schema for p in _timestamp_paths(branch, named, prefix)]
    if isinstance(schema, str):
        return _timestamp_paths(named[schema], named, prefix) if schema in named else []
    if schema.get("logicalType") == "timestamp-micros":
        return [prefix.rstrip(".")]
    if schema.get("type") == "record":
        named[schema["name"]] = schema
        return [
            p for f in schema["fields"] for p in _timestamp_paths(f["type"], named, f"{prefix}{f['name']}.")
        ]
    return []


def test_time_fields_are_every_timestamp_of_every_schema() -> None:
    for ws in codec.known_writer_schemas().values():
        raw = json.loads((codec.schema_dir() / ws.source).read_text(encoding="utf-8"))
        paths = _timestamp_paths(raw, {})
        if ws.source.startswith("history/"):
            assert set(paths) <= set(TIME_FIELDS[ws.record_name]), ws.source
        else:
            assert tuple(paths) == TIME_FIELDS[ws.record_name], ws.source


def test_time_fields_are_every_datetime_of_the_records() -> None:
    ref_times = [f.name for f in dataclasses.fields(RunRef) if "datetime" in str(f.type)]
    assert ref_times == ["start_time"]
    for name, cls in RECORD_TYPES.items():
        expected = []
        for f in dataclasses.fields(cls):
            if "datetime" in str(f.type):
                expected.append(f.name)
            elif "RunRef" in str(f.type):
                expected.extend(f"{f.name}.{sub}" for sub in ref_times)
        assert sorted(expected) == sorted(TIME_FIELDS[name]), name
    assert set(TIME_FIELDS) == set(RECORD_TYPES)
    assert typing.get_type_hints(RunRef)["start_time"] == datetime | None


def test_the_range_is_what_a_run_id_and_a_datetime_hold() -> None:
    assert datetime(1970, 1, 1, tzinfo=UTC) == EARLIEST
    assert datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) == LATEST
    assert LATEST_MICROS == (LATEST - EARLIEST) // MICRO < UUID7_MILLIS_LIMIT * 1000
    for when in (EARLIEST, EARLIEST + MICRO, LATEST):
        uid = run_id("ns", "etl", "i", "r", when)  # raises outside its 48-bit millisecond range
        assert timestamp_millis(uid) == (when - EARLIEST) // timedelta(milliseconds=1)
    with pytest.raises(ValueError, match="48-bit"):
        run_id("ns", "etl", "i", "r", EARLIEST - MICRO)


@pytest.mark.parametrize(
    "value",
    [
        EARLIEST,
        LATEST,
        datetime(2024, 5, 1, 12, tzinfo=UTC),
        datetime(1970, 1, 1, 5, tzinfo=timezone(timedelta(hours=5))),  # the epoch, in +05:00
        datetime(9999, 12, 31, 18, 59, tzinfo=timezone(timedelta(hours=-5))),  # before LATEST, in UTC
    ],
)
def test_times_in_range_pass(value: datetime) -> None:
    assert time_problem(value) is None


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (EARLIEST - MICRO, "1969-12-31T23:59:59.999999Z"),
        (datetime(1, 1, 1, tzinfo=UTC), "0001-01-01T00:00:00Z"),
        (datetime(1970, 1, 1, 4, tzinfo=timezone(timedelta(hours=5))), "1970-01-01T04:00:00+05:00"),
        (datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))), "9999-12-31T23:00:00-05:00"),
    ],
)
def test_times_out_of_range_are_refused_showing_the_time(value: datetime, shown: str) -> None:
    assert time_problem(value) == (
        f"{shown} is outside the times a record can carry "
        "(1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z)"
    )


@pytest.mark.parametrize(
    "value",
    [
        datetime(2024, 1, 1),
        datetime(2024, 1, 1, tzinfo=_NoOffset()),
        datetime(2024, 1, 1, tzinfo=_BadOffset()),
        date(2024, 1, 1),
        "2024-01-01T00:00:00Z",
        1_700_000_000,
        None,
    ],
    ids=repr,
)
def test_what_is_not_an_aware_datetime_is_refused(value: object) -> None:
    problem = time_problem(value)
    assert problem is not None and problem.startswith("must be a timezone-aware datetime, got ")


def test_micros_problems_show_the_time_or_the_number() -> None:
    assert micros_problem(0) is None and micros_problem(LATEST_MICROS) is None
    assert str(micros_problem(-1)).startswith("1969-12-31T23:59:59.999999Z is outside")
    assert str(micros_problem(LATEST_MICROS + 1)).startswith("253402300800000000 microseconds from the epoch")
    assert str(micros_problem(-(2**63))).startswith("-9223372036854775808 microseconds from the epoch")


def test_record_problems_name_the_fields_set_and_wrong() -> None:
    bad = EARLIEST - MICRO
    record = started(
        parent=RunRef("p", start_time=bad), root=RunRef("r"), nominal=True, start=datetime(2024, 1, 1)
    )
    assert [f for f, _ in record_time_problems(record)] == [
        "append_time",
        "start_time",
        "parent.start_time",
    ]
    assert record_time_problems(started(nominal=True, parent=RunRef("p"))) == []
    assert [f for f, _ in record_time_problems(declared(at=bad))] == ["append_time", "time"]
    assert [f for f, _ in record_time_problems(dataclasses.replace(ended(), end_time=bad))] == ["end_time"]


def test_raw_problems_read_int_micros_and_skip_missing_fields() -> None:
    body = {"append_time": 0, "start_time": -5, "parent": {"start_time": None}, "nominal_end_time": None}
    assert [f for f, _ in raw_time_problems("RunStarted", body)] == ["start_time"]
    body = {"append_time": LATEST_MICROS + 1, "start_time": 0, "root": {"start_time": -1}}
    assert [f for f, _ in raw_time_problems("RunStarted", body)] == ["append_time", "root.start_time"]


@pytest.mark.parametrize("delta", [-MICRO, timedelta(0), MICRO])
@pytest.mark.parametrize("path", [p for paths in TIME_FIELDS.values() for p in paths])
def test_the_decoders_fast_check_agrees_with_the_full_one(path: str, delta: timedelta) -> None:
    base: dict[str, Any] = {
        "RunStarted": started(nominal=True, parent=RunRef("p", start_time=EARLIEST), root=RunRef("r")),
        "DatasetDeclared": declared(),
        "RunEnded": ended(),
    }
    for name, record in base.items():
        if path not in TIME_FIELDS[name]:
            continue
        head, _, sub = path.partition(".")
        if sub:
            value = dataclasses.replace(getattr(record, head), **{sub: EARLIEST + delta})
        else:
            value = EARLIEST + delta
        changed = dataclasses.replace(record, **{head: value})
        assert (
            DECODED_TIMES_OK[name](changed)
            == (record_time_problems(changed) == [])
            == (delta >= timedelta(0))
        )


# -- decoding refuses what the range excludes ---------------------------------------------

BEFORE_THE_EPOCH = datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)
YEAR_ONE = datetime(1, 1, 1, tzinfo=UTC)
FULL_STARTED = started(
    nominal=True, parent=RunRef("p", "acme", "etl", "1", "i", T0), root=RunRef("r", start_time=T0)
)
BASE: dict[str, Record] = {
    "RunStarted": FULL_STARTED,
    "DatasetDeclared": declared(partition=7, offset=127),
    "RunEnded": ended(),
}


def _micros(when: datetime) -> int:
    return (when - EARLIEST) // MICRO


def _with_time(record: Any, path: str, when: datetime) -> Any:
    """`record` with the time at `path` (dotted inside a RunRef) replaced."""
    head, _, sub = path.partition(".")
    if sub:
        return dataclasses.replace(
            record, **{head: dataclasses.replace(getattr(record, head), **{sub: when})}
        )
    return dataclasses.replace(record, **{head: when})


@pytest.mark.parametrize("when", [BEFORE_THE_EPOCH, YEAR_ONE, EARLIEST - MICRO])
@pytest.mark.parametrize(
    ("record", "path"),
    [(BASE[name], f) for name, fields in TIME_FIELDS.items() for f in fields],
    ids=lambda x: x if isinstance(x, str) else type(x).__name__,
)
def test_a_time_before_the_epoch_raises_invalid_time_naming_the_field(
    record: Record, path: str, when: datetime
) -> None:
    data = codec.encode(_with_time(record, path, when))  # encode does not check the range
    with pytest.raises(InvalidTimeError) as info:
        codec.decode(data, 5, 42)
    error = info.value
    assert isinstance(error, DecodeError)
    assert (error.error_reason, error.field, error.partition, error.offset) == ("invalid_time", path, 5, 42)
    assert str(error).startswith(
        f"cannot decode record at partition 5, offset 42: {type(record).__name__} field {path!r}: "
    )
    assert "is outside the times a record can carry (1970-01-01T00:00:00Z to 9999" in str(error)
    assert when.isoformat().replace("+00:00", "Z") in str(error)


def test_invalid_time_names_the_records_own_position_without_one_given() -> None:
    data = codec.encode(_with_time(BASE["DatasetDeclared"], "time", BEFORE_THE_EPOCH))
    with pytest.raises(InvalidTimeError, match="partition 7, offset 127: DatasetDeclared field 'time'"):
        codec.decode(data)


def test_every_bad_time_is_listed_and_the_first_is_the_field() -> None:
    bad = _with_time(_with_time(FULL_STARTED, "append_time", YEAR_ONE), "root.start_time", YEAR_ONE)
    with pytest.raises(InvalidTimeError) as info:
        codec.decode(codec.encode(bad), 0, 0)
    assert info.value.field == "append_time"
    assert "field 'append_time': 0001-01-01T00:00:00Z" in str(info.value)
    assert "; RunStarted field 'root.start_time': 0001-01-01T00:00:00Z" in str(info.value)


def _raw_body(record_name: str, fields: dict[str, object], schema: codec.WriterSchema | None = None) -> bytes:
    """A body with times given as int micros (any long): the schema without its logical types."""
    ws = schema or codec.current_schemas()[record_name]
    raw = json.loads((codec.schema_dir() / ws.source).read_text(encoding="utf-8"))
    plain = fastavro.parse_schema(
        json.loads(json.dumps(raw).replace('"logicalType": "timestamp-micros"', '"x": 0')), _write_hint=False
    )
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, plain, fields)
    return codec.MAGIC + ws.fingerprint + buf.getvalue()


@pytest.mark.parametrize("micros", [-(2**62), -(2**40), -1, LATEST_MICROS + 1, 2**48 * 1000, 2**63 - 1])
@pytest.mark.parametrize("path", TIME_FIELDS["RunStarted"])
def test_a_time_no_datetime_holds_raises_invalid_time_naming_the_field(path: str, micros: int) -> None:
    fields = codec.to_avro_dict(FULL_STARTED)
    good = _micros(T0)
    for name, value in list(fields.items()):
        if isinstance(value, datetime):
            fields[name] = good
        elif isinstance(value, dict):
            fields[name] = {**value, "start_time": good}
    head, _, sub = path.partition(".")
    if sub:
        fields[head] = {**fields[head], sub: micros}
    else:
        fields[head] = micros
    with pytest.raises(InvalidTimeError, match=rf"partition 3, offset 7: RunStarted field '{path}'") as info:
        codec.decode(_raw_body("RunStarted", fields), 3, 7)
    assert info.value.field == path


def test_a_bad_time_under_an_older_schema_raises_invalid_time() -> None:
    v1 = next(ws for ws in codec.known_writer_schemas().values() if ws.source == "history/RunStarted.v1.avsc")
    fields: dict[str, object] = {
        "partition": 4,
        "offset": 10,
        "append_time": _micros(T0),
        "engine_run_id": "old-run",
        "task_id": "t",
        "namespace": "ns",
        "workflow_type": "legacy",
        "workflow_version": "0.9",
        "workflow_instance": "legacy-1",
        "principal": None,
        "start_time": _micros(T0),
        "nominal_start_time": None,
        "nominal_end_time": None,
        "parent": {
            "engine_run_id": "p",
            "namespace": None,
            "workflow_type": None,
            "workflow_version": None,
            "workflow_instance": None,
            "start_time": -1,
        },
    }
    with pytest.raises(InvalidTimeError, match=r"offset 10: RunStarted field 'parent\.start_time'") as info:
        codec.decode(_raw_body("RunStarted", fields, v1), 4, 10)
    assert info.value.field == "parent.start_time"
    fields["start_time"] = -(2**62)  # beyond datetime: fastavro overflows, the field is still named
    with pytest.raises(InvalidTimeError, match="field 'start_time': -4611686018427387904 microseconds"):
        codec.decode(_raw_body("RunStarted", fields, v1), 4, 10)
    fields["start_time"] = _micros(T0)
    fields["parent"] = {**fields["parent"], "start_time": _micros(T0)}  # type: ignore[dict-item]
    assert isinstance(codec.decode(_raw_body("RunStarted", fields, v1), 4, 10), RunStarted)
