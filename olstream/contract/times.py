"""The times a record can carry: 1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z (UTC).

A run's start time becomes the 48-bit Unix-millisecond timestamp of its OpenLineage run id
(UUIDv7, `streams/runid.py`): nothing before the epoch fits, nor anything from 2**48 ms after
it. A Python datetime ends earlier (year 9999), so its maximum is the upper bound. Every time
field is held to the same range: `codec.decode` refuses a record carrying another time
(`InvalidTimeError`, naming the field) and the writer API refuses to write one.

`codec.encode` does not check the range (the decoder is the gate): tests build such records.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import fastavro
from fastavro.schema import parse_schema

from olstream.contract.records import DatasetDeclared, Record, RunEnded, RunStarted

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)
_ONE_MICRO = timedelta(microseconds=1)
LATEST_MICROS = (LATEST - EARLIEST) // _ONE_MICRO
UUID7_MILLIS_LIMIT = 1 << 48  # run ids hold Unix milliseconds below this
if LATEST_MICROS >= UUID7_MILLIS_LIMIT * 1000:  # pragma: no cover - a fact of datetime
    raise RuntimeError("datetime.max no longer fits a UUIDv7 timestamp: bound LATEST by 2**48 ms")
RANGE_TEXT = "1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z"

# Every time field of every record (dotted: inside a RunRef); a None optional field is fine.
TIME_FIELDS: dict[str, tuple[str, ...]] = {
    "RunStarted": (
        "append_time",
        "start_time",
        "nominal_start_time",
        "nominal_end_time",
        "parent.start_time",
        "root.start_time",
    ),
    "DatasetDeclared": ("append_time", "time"),
    "RunEnded": ("append_time", "end_time"),
}


def _iso(t: datetime) -> str:
    text = t.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def time_problem(value: object) -> str | None:
    """Why `value` cannot be a record's time (a phrase to follow the field's name), or None."""
    try:
        aware = isinstance(value, datetime) and value.utcoffset() is not None
    except (TypeError, ValueError):  # a tzinfo whose utcoffset() is not a valid offset
        aware = False
    if not aware:
        return f"must be a timezone-aware datetime, got {value!r}"
    assert isinstance(value, datetime)
    if EARLIEST <= value <= LATEST:
        return None
    return f"{_iso(value)} is outside the times a record can carry ({RANGE_TEXT})"


def micros_problem(micros: int) -> str | None:
    """`time_problem` for a time given as Avro timestamp-micros (microseconds since the epoch)."""
    if 0 <= micros <= LATEST_MICROS:
        return None
    try:
        shown = _iso(EARLIEST + timedelta(microseconds=micros))
    except OverflowError:
        shown = f"{micros} microseconds from the epoch"
    return f"{shown} is outside the times a record can carry ({RANGE_TEXT})"


def _field_value(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if obj is None:
            return None
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
    return obj


def record_time_problems(record: Record) -> list[tuple[str, str]]:
    """(field, problem) for every time of `record` that is set and out of range or not aware."""
    problems = []
    for path in TIME_FIELDS.get(type(record).__name__, ()):
        value = _field_value(record, path)
        problem = None if value is None else time_problem(value)
        if problem is not None:
            problems.append((path, problem))
    return problems


def raw_time_problems(record_name: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """`record_time_problems` for a body read without logical types (times as int micros)."""
    problems = []
    for path in TIME_FIELDS.get(record_name, ()):
        value = _field_value(body, path)
        problem = micros_problem(value) if isinstance(value, int) else None
        if problem is not None:
            problems.append((path, problem))
    return problems


def _without_logical_types(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_without_logical_types(s) for s in schema]
    if isinstance(schema, dict):
        if schema.get("logicalType") == "timestamp-micros":
            return schema["type"]
        return {k: _without_logical_types(v) for k, v in schema.items()}
    return schema


_PLAIN_SCHEMAS: dict[bytes, Any] = {}


def read_plain(
    fingerprint: bytes, parsed: dict[str, Any], data: bytes, start: int
) -> tuple[dict[str, Any], int]:
    """The body at `data[start:]` read by fastavro with times as int micros; (body, end position).

    For naming the field of a time no datetime can hold. Raises what fastavro raises.
    """
    plain = _PLAIN_SCHEMAS.get(fingerprint)
    if plain is None:
        plain = _PLAIN_SCHEMAS[fingerprint] = parse_schema(_without_logical_types(parsed), _write_hint=False)
    buf = io.BytesIO(data)
    buf.seek(start)
    body = fastavro.schemaless_reader(buf, plain, None)
    if not isinstance(body, dict):
        raise TypeError(f"the body read as {type(body).__name__}, not a record")
    return body, buf.tell()


# Fast checks for decoded records, on the decoder's hot path: the decoder builds only aware UTC
# datetimes, none after LATEST (datetime.max), so only the lower bound remains to check.
def _started_ok(r: RunStarted) -> bool:
    lo = EARLIEST
    if r.append_time < lo or r.start_time < lo:
        return False
    if (t := r.nominal_start_time) is not None and t < lo:
        return False
    if (t := r.nominal_end_time) is not None and t < lo:
        return False
    if (ref := r.parent) is not None and (t := ref.start_time) is not None and t < lo:
        return False
    return (ref := r.root) is None or (t := ref.start_time) is None or t >= lo


def _declared_ok(r: DatasetDeclared) -> bool:
    return r.append_time >= EARLIEST and r.time >= EARLIEST


def _ended_ok(r: RunEnded) -> bool:
    return r.append_time >= EARLIEST and r.end_time >= EARLIEST


DECODED_TIMES_OK: dict[str, Callable[[Any], bool]] = {
    "RunStarted": _started_ok,
    "DatasetDeclared": _declared_ok,
    "RunEnded": _ended_ok,
}
"""Record name -> whether a decoded record's times are all in range (false: see record_time_problems)."""
