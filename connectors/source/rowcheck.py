"""Decides whether a stored row decodes, and builds the headers of its Kafka message.

Headers of the records topic: `olstream.contract.wire`; the errors topic adds
`olstream.shared.deadletter.ERROR` with the reason.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import fastavro
from fastavro.schema import parse_schema

from olstream.connectors.source.avro_check import BodyCheck, UnsupportedSchema, compile_body_check
from olstream.contract import codec
from olstream.contract.wire import HEADER_FINGERPRINT, HEADER_OFFSET, HEADER_PARTITION, HEADER_TYPE
from olstream.eventlog.store import StoredRow
from olstream.shared import deadletter

Headers = list[tuple[str, str | bytes | None]]


# timestamp-micros values a datetime can hold (0001-01-01 .. 9999-12-31T23:59:59.999999)
_MIN_MICROS = -62_135_596_800_000_000
_MAX_MICROS = 253_402_300_799_999_999


def _without_logical_types(schema: Any) -> Any:
    """The schema with logicalType annotations dropped: the same bytes, plain values."""
    if isinstance(schema, dict):
        return {k: _without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_without_logical_types(v) for v in schema]
    return schema


def _timestamp_paths(
    schema: Any, prefix: tuple[str, ...] = (), named: dict[str, Any] | None = None
) -> tuple[tuple[str, ...], ...]:
    """Field paths of a record schema that hold timestamps (through nullable nested records)."""
    named = {} if named is None else named
    out: list[tuple[str, ...]] = []
    for f in schema.get("fields", ()) if isinstance(schema, dict) else ():
        for t in f["type"] if isinstance(f["type"], list) else [f["type"]]:
            if isinstance(t, str) and t in named:
                t = named[t]
            if isinstance(t, dict) and str(t.get("logicalType", "")).startswith("timestamp"):
                out.append((*prefix, f["name"]))
            elif isinstance(t, dict) and t.get("type") == "record":
                named[str(t["name"])] = t
                out.extend(_timestamp_paths(t, (*prefix, f["name"]), named))
    return tuple(out)


def _out_of_range_timestamp(body: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> int | None:
    for path in paths:
        value: Any = body
        for name in path:
            value = value.get(name) if isinstance(value, dict) else None
        if isinstance(value, int) and not _MIN_MICROS <= value <= _MAX_MICROS:
            return value
    return None


@dataclass(frozen=True, slots=True)
class _KnownSchema:
    record_name: bytes
    fingerprint_hex: bytes
    checker: Any
    timestamps: tuple[tuple[str, ...], ...]
    walk: BodyCheck | None
    type_header: tuple[str, bytes]
    fingerprint_header: tuple[str, bytes]


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint at `pos`: (value, position after it); IndexError when the bytes end."""
    b = data[pos]
    n, shift = b & 0x7F, 7
    while b & 0x80:
        pos += 1
        b = data[pos]
        n |= (b & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos + 1


def embedded_position(data: bytes) -> tuple[int, int] | None:
    """The (partition, offset) a record's body starts with (every schema begins with them)."""
    try:
        partition, pos = _read_varint(data, codec.HEADER_LEN)
        offset, _ = _read_varint(data, pos)
    except IndexError:
        return None
    return partition, offset


class RowChecker:
    """Decides whether a row's bytes decode, and builds its headers.

    With `check_bodies` (the default) the whole body is decoded under its writer schema (so
    truncated or corrupt bodies are caught, including out-of-range timestamps); without it only
    the header (magic, known fingerprint) and the position the body starts with are checked.
    """

    def __init__(self, *, check_bodies: bool = True) -> None:
        self._check_bodies = check_bodies
        self._partition_headers: dict[int, tuple[str, bytes]] = {}
        self._schemas: dict[bytes, _KnownSchema] = {}
        for fp, ws in codec.known_writer_schemas().items():
            # Without logical types (no datetime built per field) but with fastavro's parsed hint
            # (not parsed again per row); timestamps are range-checked as decode() would.
            plain = parse_schema(_without_logical_types(ws.parsed))
            stamps = _timestamp_paths(ws.parsed)
            try:
                walk: BodyCheck | None = compile_body_check(ws.parsed)
            except UnsupportedSchema:
                walk = None  # fastavro alone decides
            name, hex_fp = ws.record_name.encode(), fp.hex().encode()
            self._schemas[fp] = _KnownSchema(
                name, hex_fp, plain, stamps, walk, (HEADER_TYPE, name), (HEADER_FINGERPRINT, hex_fp)
            )

    def headers_for(self, row: StoredRow) -> Headers | str:
        """The message headers for a good row, or the reason the row does not decode."""
        data = row.payload
        known = self._schemas.get(data[2 : codec.HEADER_LEN])
        if data[:2] != codec.MAGIC or len(data) < codec.HEADER_LEN:
            return "not Avro single-object encoding (bad magic or too short)"
        if known is None:
            return f"unknown writer-schema fingerprint {data[2 : codec.HEADER_LEN].hex()}"
        where: tuple[object, object] | None
        walked = None
        if self._check_bodies and known.walk is not None:
            # Cheap: accepts only bodies fastavro reads to their end with in-range timestamps;
            # anything else goes to fastavro below, which decides and names the reason.
            walked = known.walk(data, codec.HEADER_LEN)
            if walked is not None and walked[2] != len(data):
                walked = None
        if walked is not None:
            where = (walked[0], walked[1])
        elif self._check_bodies:
            buf = io.BytesIO(data)
            buf.seek(codec.HEADER_LEN)
            try:
                body = fastavro.schemaless_reader(buf, known.checker, None)
            except (EOFError, ValueError, KeyError, TypeError, IndexError, OverflowError) as e:
                return f"corrupt {known.record_name.decode()} body: {type(e).__name__}: {e}"
            if buf.tell() != len(data):
                return f"{len(data) - buf.tell()} trailing bytes after the {known.record_name.decode()} body"
            if not isinstance(body, dict):
                return f"corrupt {known.record_name.decode()} body"
            bad_time = _out_of_range_timestamp(body, known.timestamps)
            if bad_time is not None:
                return f"corrupt {known.record_name.decode()} body: {bad_time} is outside the datetime range"
            where = (body["partition"], body["offset"])
        else:
            where = embedded_position(data)
        if where != (row.partition, row.offset):
            return f"record names position {where}, not its row's ({row.partition}, {row.offset})"
        partition_header = self._partition_headers.get(row.partition)
        if partition_header is None:
            partition_header = (HEADER_PARTITION, str(row.partition).encode())
            self._partition_headers[row.partition] = partition_header
        # the same immutable tuples for every row: only the offset header is new per row
        return [
            partition_header,
            (HEADER_OFFSET, str(row.offset).encode()),
            known.type_header,
            known.fingerprint_header,
        ]

    def error_headers(self, row: StoredRow, reason: str) -> Headers:
        """Headers of an errors-topic message: position, what can be read of the header, the reason."""
        headers: Headers = [
            (HEADER_PARTITION, str(row.partition).encode()),
            (HEADER_OFFSET, str(row.offset).encode()),
        ]
        data = row.payload
        if len(data) >= codec.HEADER_LEN and data[:2] == codec.MAGIC:
            known = self._schemas.get(data[2 : codec.HEADER_LEN])
            if known is not None:
                headers.append((HEADER_TYPE, known.record_name))
            headers.append((HEADER_FINGERPRINT, data[2 : codec.HEADER_LEN].hex().encode()))
        headers.append((deadletter.ERROR, reason.encode("utf-8", "replace")))
        return headers
