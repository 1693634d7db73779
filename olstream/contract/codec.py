"""Avro single-object encoding of the event-log records.

Layout: magic ``C3 01``, the 8-byte little-endian CRC-64-AVRO fingerprint of the
writer schema, then the Avro body. Decoding finds the writer schema by its
fingerprint (current schemas and every historical version under ``avro/history``)
and resolves it to the current reader schema, so older records still decode.

Records under the current schemas are encoded and decoded by functions generated once per
schema (`avro_codegen`, byte-identical to fastavro and several times faster); when encoding
fails, the closure encoder of `avro_compiled` re-runs to name the offending field. Records
under an older writer schema go through fastavro's schema resolution.

A record that decodes but carries a time outside what a record can carry (`times`: before the
epoch, or beyond datetime) raises InvalidTimeError, a DecodeError naming the field.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

from olstream.contract.avro_codegen import generate
from olstream.contract.avro_compiled import Decoder, Encoder, SchemaCompiler
from olstream.contract.records import (
    RECORD_TYPES,
    DatasetDeclared,
    Direction,
    Record,
    RunEnded,
    RunError,
    RunRef,
    RunStarted,
    RunStatus,
)
from olstream.contract.records import from_avro_dict as from_avro_dict  # re-exported
from olstream.contract.records import to_avro_dict as to_avro_dict  # re-exported
from olstream.contract.times import DECODED_TIMES_OK, raw_time_problems, read_plain, record_time_problems
from olstream.shared.errors import DecodeError, InvalidTimeError

MAGIC = b"\xc3\x01"
HEADER_LEN = 10
RECORD_NAMES = ("RunStarted", "DatasetDeclared", "RunEnded")


def schema_dir() -> Path:
    """The folder holding the `.avsc` files: the top-level `avro/`, seen as `olstream/contract/avro`."""
    folder = Path(__file__).parent / "avro"
    if (folder / "RunStarted.avsc").is_file():
        return folder
    raise FileNotFoundError(f"the avro/ schema folder is not installed at {folder}")


@dataclass(frozen=True, slots=True)
class WriterSchema:
    record_name: str
    fingerprint: bytes
    parsed: dict[str, Any]
    source: str


def _load(path: Path) -> tuple[str, dict[str, Any], bytes]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    parsed = parse_schema(raw, _write_hint=False)
    if not isinstance(parsed, dict):
        raise ValueError(f"{path} does not hold an Avro record schema")
    fp = int(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"), 16).to_bytes(8, "little")
    return str(raw["name"]), parsed, fp


@cache
def current_schemas() -> dict[str, WriterSchema]:
    """Record name -> the current (reader and writer) schema."""
    out: dict[str, WriterSchema] = {}
    for name in RECORD_NAMES:
        path = schema_dir() / f"{name}.avsc"
        rec, parsed, fp = _load(path)
        out[rec] = WriterSchema(rec, fp, parsed, path.name)
    return out


@cache
def known_writer_schemas() -> dict[bytes, WriterSchema]:
    """Fingerprint -> writer schema, for the current schemas and every historical version."""
    out = {ws.fingerprint: ws for ws in current_schemas().values()}
    history = schema_dir() / "history"
    if history.is_dir():
        for path in sorted(history.glob("*.avsc")):
            rec, parsed, fp = _load(path)
            out.setdefault(fp, WriterSchema(rec, fp, parsed, f"history/{path.name}"))
    return out


def fingerprint_of(record_name: str) -> bytes:
    return current_schemas()[record_name].fingerprint


_RECORD_CLASSES: dict[str, type[Any]] = {
    "RunStarted": RunStarted,
    "DatasetDeclared": DatasetDeclared,
    "RunEnded": RunEnded,
    "RunRef": RunRef,
    "RunError": RunError,
}
_ENUM_CLASSES: dict[str, type[Any]] = {"Direction": Direction, "RunStatus": RunStatus}


@dataclass(frozen=True, slots=True)
class _RecordCodec:
    header: bytes
    encode: Encoder  # generated, fast
    encode_tail: Encoder  # generated: the fields after partition and offset
    encode_tail_values: Callable[..., None]  # the same, from values in schema order
    tail_fields: tuple[str, ...]  # their names, in schema order
    encode_checked: Encoder  # closures naming the offending field on error
    prefixes: dict[int, bytes] = field(default_factory=dict)  # partition -> header + partition


_TimesOk = Callable[[Any], bool]


@cache
def _compiled() -> tuple[dict[type[Any], _RecordCodec], dict[bytes, tuple[str, Decoder, _TimesOk]]]:
    """(record class -> its encoders, current fingerprint -> (name, generated decoder, time check))."""
    encoders: dict[type[Any], _RecordCodec] = {}
    decoders: dict[bytes, tuple[str, Decoder, _TimesOk]] = {}
    for name, ws in current_schemas().items():
        raw = json.loads((schema_dir() / ws.source).read_text(encoding="utf-8"))
        head = [(f["name"], f["type"]) for f in raw["fields"][:2]]
        if head != [("partition", "int"), ("offset", "long")]:
            raise ValueError(f"{ws.source} must start with partition: int, offset: long")
        generated = generate(raw, _RECORD_CLASSES, _ENUM_CLASSES, tail_skip=2)
        checked = SchemaCompiler().encoder(raw)
        header = MAGIC + ws.fingerprint
        tail_fields = tuple(f["name"] for f in raw["fields"][2:])
        encoders[RECORD_TYPES[name]] = _RecordCodec(
            header,
            generated.encode,
            generated.encode_tail,
            generated.encode_tail_values,
            tail_fields,
            checked,
        )
        decoders[ws.fingerprint] = (name, generated.decode, DECODED_TIMES_OK[name])
    return encoders, decoders


def _codec_for(record: Record) -> _RecordCodec:
    rc = _compiled()[0].get(type(record))
    if rc is None:
        raise ValueError(f"not an event-log record: {type(record).__name__}")
    return rc


def _encode_error(rc: _RecordCodec, record: Record, fast_error: Exception) -> ValueError:
    """Re-encode with the checking encoder to name the offending field."""
    try:
        rc.encode_checked(bytearray(), record)
    except ValueError as e:
        return ValueError(f"cannot encode {type(record).__name__}: {e}")
    return ValueError(f"cannot encode {type(record).__name__}: {fast_error!r}")


def encode(record: Record) -> bytes:
    """The record in Avro single-object encoding, under its current schema.

    Raises ValueError naming the field when a value does not fit the schema.
    """
    rc = _codec_for(record)
    buf = bytearray(rc.header)
    try:
        rc.encode(buf, record)
    except Exception as e:
        raise _encode_error(rc, record, e) from e
    return bytes(buf)


def encode_with(schema: WriterSchema, data: dict[str, Any]) -> bytes:
    """Encode a raw dict under a given writer schema (used for older schema versions)."""
    buf = io.BytesIO()
    buf.write(MAGIC)
    buf.write(schema.fingerprint)
    fastavro.schemaless_writer(buf, schema.parsed, data)
    return buf.getvalue()


def peek_record_name(data: bytes, partition: int | None = None, offset: int | None = None) -> str:
    """The record type named by the header's fingerprint, without decoding the body."""
    data = bytes(data[:HEADER_LEN])
    if len(data) < HEADER_LEN or data[:2] != MAGIC:
        raise DecodeError("not Avro single-object encoding (bad magic or too short)", partition, offset)
    ws = known_writer_schemas().get(data[2:HEADER_LEN])
    if ws is None:
        raise DecodeError(f"unknown writer-schema fingerprint {data[2:HEADER_LEN].hex()}", partition, offset)
    return ws.record_name


_DECODE_ERRORS = (
    EOFError,
    ValueError,
    KeyError,
    TypeError,
    IndexError,
    UnicodeDecodeError,
    AssertionError,
    OverflowError,
)


def decode(data: bytes, partition: int | None = None, offset: int | None = None) -> Record:
    """Decode single-object-encoded bytes; raise DecodeError naming the position on any problem.

    A time out of range (`times`) raises its subclass InvalidTimeError, naming the field too.
    """
    if type(data) is not bytes:
        data = bytes(data)  # bytearray / memoryview: slices must be hashable
    fast = _compiled()[1].get(data[2:HEADER_LEN]) if data[:2] == MAGIC else None
    if fast is not None:
        name, read, times_ok = fast
        try:
            record, end = read(data, HEADER_LEN)
        except OverflowError as e:  # a time no datetime holds
            raise _overflow_error(name, data, partition, offset, e) from e
        except _DECODE_ERRORS as e:
            raise DecodeError(f"corrupt {name} body: {type(e).__name__}: {e}", partition, offset) from e
        if end != len(data):
            raise DecodeError(f"{len(data) - end} trailing bytes after the {name} body", partition, offset)
        if times_ok(record):
            return record  # type: ignore[no-any-return]
        error = _invalid_time(name, record_time_problems(record), partition, offset, record)
        if error is None:  # pragma: no cover - the fast check and the full one disagree
            return record  # type: ignore[no-any-return]
        raise error
    return _decode_resolving(data, partition, offset)


def _invalid_time(
    name: str, problems: list[tuple[str, str]], partition: int | None, offset: int | None, body: Any
) -> InvalidTimeError | None:
    """The error for the time `problems` of a decoded body (a record, or a raw dict); None if none."""
    if not problems:
        return None
    if partition is None:  # name the record by the position it holds
        get = body.get if isinstance(body, dict) else partial(getattr, body)
        partition, offset = get("partition"), get("offset")
    text = "; ".join(f"{name} field {field!r}: {problem}" for field, problem in problems)
    return InvalidTimeError(text, partition, offset, problems[0][0])


def _overflow_error(
    name: str, data: bytes, partition: int | None, offset: int | None, cause: Exception
) -> DecodeError:
    """For a time no datetime holds: InvalidTimeError naming the field when the rest decodes."""
    fp = data[2:HEADER_LEN]
    error = None
    try:
        body, end = read_plain(fp, known_writer_schemas()[fp].parsed, data, HEADER_LEN)
        if end != len(data):
            return DecodeError(f"{len(data) - end} trailing bytes after the {name} body", partition, offset)
        error = _invalid_time(name, raw_time_problems(name, body), partition, offset, body)
    except _DECODE_ERRORS:
        pass
    return error or DecodeError(f"corrupt {name} body: {type(cause).__name__}: {cause}", partition, offset)


def _decode_resolving(data: bytes, partition: int | None, offset: int | None) -> Record:
    """Decode with fastavro, resolving an older writer schema to the current reader schema."""
    name = peek_record_name(data, partition, offset)
    writer = known_writer_schemas()[data[2:HEADER_LEN]]
    reader = current_schemas()[name]
    buf = io.BytesIO(data)
    buf.seek(HEADER_LEN)
    try:
        if writer.fingerprint == reader.fingerprint:
            d = fastavro.schemaless_reader(buf, writer.parsed, None)
        else:
            d = fastavro.schemaless_reader(buf, writer.parsed, reader.parsed)
        if buf.tell() != len(data):
            raise DecodeError(
                f"{len(data) - buf.tell()} trailing bytes after the {name} body", partition, offset
            )
        assert isinstance(d, dict)
        record = from_avro_dict(name, d)
    except DecodeError:
        raise
    except OverflowError as e:
        raise _overflow_error(name, data, partition, offset, e) from e
    except _DECODE_ERRORS as e:
        raise DecodeError(f"corrupt {name} body: {type(e).__name__}: {e}", partition, offset) from e
    error = _invalid_time(name, record_time_problems(record), partition, offset, record)
    if error is not None:
        raise error
    return record


def _zigzag_varint(n: int) -> bytes:
    if 0 <= n < 64:
        return _SMALL_VARINTS[n]
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return bytes((z,))
    if z < 0x4000:
        return bytes(((z & 0x7F) | 0x80, z >> 7))
    if z < 0x200000:
        return bytes(((z & 0x7F) | 0x80, ((z >> 7) & 0x7F) | 0x80, z >> 14))
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL_VARINTS = tuple(bytes([n << 1]) for n in range(64))


def _new_prefix(rc: _RecordCodec, record_type: type[Any], partition: int) -> bytes:
    """Magic, fingerprint and the partition's varint (then cached per record type and partition)."""
    if type(partition) is not int or not -(2**31) <= partition < 2**31:
        raise ValueError(f"cannot encode {record_type.__name__}: partition {partition!r} is not an Avro int")
    return rc.prefixes.setdefault(partition, rc.header + _zigzag_varint(partition))


def _splice(prefix: bytes, rest: bytes | bytearray, offset: int) -> bytes:
    return prefix + (_SMALL_VARINTS[offset] if 0 <= offset < 64 else _zigzag_varint(offset)) + rest


def offset_encoder(record: Record) -> Callable[[int], bytes]:
    """A function `offset -> bytes` giving `encode(replace(record, offset=offset))`, cheaply.

    Every schema starts with ``partition: int`` then ``offset: long`` (checked at load), so
    the fields after them are encoded once, now (errors surface to the caller), and only
    the offset's varint is spliced in per call (the store assigns the offset inside its
    append transaction).
    """
    rc = _codec_for(record)
    prefix = rc.prefixes.get(record.partition) or _new_prefix(rc, type(record), record.partition)
    tail = bytearray()
    try:
        rc.encode_tail(tail, record)
    except Exception as e:
        raise _encode_error(rc, record, e) from e
    return partial(_splice, prefix, tail)  # bytes + bytearray is bytes: no copy needed here


def tail_fields(record_type: type[Record]) -> tuple[str, ...]:
    """The names of a record's fields after partition and offset, in schema order."""
    rc = _compiled()[0].get(record_type)
    if rc is None:
        raise ValueError(f"not an event-log record type: {record_type.__name__}")
    return rc.tail_fields


def values_encoder(
    record_type: type[Record], partition: int, values: tuple[Any, ...]
) -> Callable[[int], bytes]:
    """`offset_encoder` for a record given as its tail values (schema order, see `tail_fields`).

    The bulk path of the writer: no record object is built. On a bad value the record is built
    after all, to name the offending field.
    """
    rc = _compiled()[0][record_type]
    prefix = rc.prefixes.get(partition) or _new_prefix(rc, record_type, partition)
    tail = bytearray()
    try:
        rc.encode_tail_values(tail, *values)
    except Exception as e:
        record = record_type(partition=partition, offset=0, **dict(zip(rc.tail_fields, values, strict=True)))
        raise _encode_error(rc, record, e) from e
    return partial(_splice, prefix, tail)
