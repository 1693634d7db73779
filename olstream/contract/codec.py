"""Avro single-object encoding of the event-log records.

Layout: magic ``C3 01``, the 8-byte little-endian CRC-64-AVRO fingerprint of the
writer schema, then the Avro body. Decoding finds the writer schema by its
fingerprint (current schemas and every historical version under ``avro/history``)
and resolves it to the current reader schema, so older records still decode.

Records under the current schemas are encoded and decoded by functions generated once per
schema (`avro_codegen`, byte-identical to fastavro and several times faster); when encoding
fails, the closure encoder of `avro_compiled` re-runs to name the offending field. Records
under an older writer schema go through fastavro's schema resolution.
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
from olstream.shared.errors import DecodeError

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


def _ref_to_avro(ref: RunRef | None) -> dict[str, Any] | None:
    if ref is None:
        return None
    return {
        "engine_run_id": ref.engine_run_id,
        "namespace": ref.namespace,
        "workflow_type": ref.workflow_type,
        "workflow_version": ref.workflow_version,
        "workflow_instance": ref.workflow_instance,
        "start_time": ref.start_time,
        "job_name": ref.job_name,
    }


def _ref_from_avro(d: dict[str, Any] | None) -> RunRef | None:
    if d is None:
        return None
    return RunRef(
        engine_run_id=d["engine_run_id"],
        namespace=d.get("namespace"),
        workflow_type=d.get("workflow_type"),
        workflow_version=d.get("workflow_version"),
        workflow_instance=d.get("workflow_instance"),
        start_time=d.get("start_time"),
        job_name=d.get("job_name"),
    )


def to_avro_dict(record: Record) -> dict[str, Any]:
    """The record as the dict fastavro writes."""
    if isinstance(record, RunStarted):
        return {
            "partition": record.partition,
            "offset": record.offset,
            "append_time": record.append_time,
            "engine_run_id": record.engine_run_id,
            "task_id": record.task_id,
            "namespace": record.namespace,
            "workflow_type": record.workflow_type,
            "workflow_version": record.workflow_version,
            "workflow_instance": record.workflow_instance,
            "principal": record.principal,
            "start_time": record.start_time,
            "nominal_start_time": record.nominal_start_time,
            "nominal_end_time": record.nominal_end_time,
            "parent": _ref_to_avro(record.parent),
            "root": _ref_to_avro(record.root),
            "supersedes": record.supersedes,
        }
    if isinstance(record, DatasetDeclared):
        return {
            "partition": record.partition,
            "offset": record.offset,
            "append_time": record.append_time,
            "engine_run_id": record.engine_run_id,
            "direction": record.direction.value,
            "key": record.key,
            "dataset_namespace": record.dataset_namespace,
            "dataset_name": record.dataset_name,
            "version": record.version,
            "time": record.time,
        }
    error = record.error
    return {
        "partition": record.partition,
        "offset": record.offset,
        "append_time": record.append_time,
        "engine_run_id": record.engine_run_id,
        "status": record.status.value,
        "end_time": record.end_time,
        "error": None
        if error is None
        else {"message": error.message, "type": error.type, "stack_trace": error.stack_trace},
    }


def from_avro_dict(record_name: str, d: dict[str, Any]) -> Record:
    """The frozen record for a dict fastavro read."""
    if record_name == "RunStarted":
        return RunStarted(
            partition=d["partition"],
            offset=d["offset"],
            append_time=d["append_time"],
            engine_run_id=d["engine_run_id"],
            task_id=d["task_id"],
            namespace=d["namespace"],
            workflow_type=d["workflow_type"],
            workflow_version=d["workflow_version"],
            workflow_instance=d["workflow_instance"],
            start_time=d["start_time"],
            principal=d.get("principal"),
            nominal_start_time=d.get("nominal_start_time"),
            nominal_end_time=d.get("nominal_end_time"),
            parent=_ref_from_avro(d.get("parent")),
            root=_ref_from_avro(d.get("root")),
            supersedes=d.get("supersedes"),
        )
    if record_name == "DatasetDeclared":
        return DatasetDeclared(
            partition=d["partition"],
            offset=d["offset"],
            append_time=d["append_time"],
            engine_run_id=d["engine_run_id"],
            direction=Direction(d["direction"]),
            key=d["key"],
            dataset_namespace=d["dataset_namespace"],
            dataset_name=d["dataset_name"],
            version=d.get("version"),
            time=d["time"],
        )
    err = d.get("error")
    return RunEnded(
        partition=d["partition"],
        offset=d["offset"],
        append_time=d["append_time"],
        engine_run_id=d["engine_run_id"],
        status=RunStatus(d["status"]),
        end_time=d["end_time"],
        error=None if err is None else RunError(err["message"], err.get("type"), err.get("stack_trace")),
    )


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


@cache
def _compiled() -> tuple[dict[type[Any], _RecordCodec], dict[bytes, tuple[str, Decoder]]]:
    """(record class -> its encoders, current fingerprint -> (record name, generated decoder))."""
    encoders: dict[type[Any], _RecordCodec] = {}
    decoders: dict[bytes, tuple[str, Decoder]] = {}
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
        decoders[ws.fingerprint] = (name, generated.decode)
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
    EOFError, ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError, AssertionError, OverflowError,
)


def decode(data: bytes, partition: int | None = None, offset: int | None = None) -> Record:
    """Decode single-object-encoded bytes; raise DecodeError naming the position on any problem."""
    if type(data) is not bytes:
        data = bytes(data)  # bytearray / memoryview: slices must be hashable
    fast = _compiled()[1].get(data[2:HEADER_LEN]) if data[:2] == MAGIC else None
    if fast is not None:
        name, read = fast
        try:
            record, end = read(data, HEADER_LEN)
        except _DECODE_ERRORS as e:
            raise DecodeError(f"corrupt {name} body: {type(e).__name__}: {e}", partition, offset) from e
        if end != len(data):
            raise DecodeError(f"{len(data) - end} trailing bytes after the {name} body", partition, offset)
        return record  # type: ignore[no-any-return]
    return _decode_resolving(data, partition, offset)


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
        return from_avro_dict(name, d)
    except DecodeError:
        raise
    except _DECODE_ERRORS as e:
        raise DecodeError(f"corrupt {name} body: {type(e).__name__}: {e}", partition, offset) from e


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
