"""The Avro contract: round trips, byte-identity with fastavro, schema evolution, decode errors."""

from __future__ import annotations

import dataclasses
import io
import json
import random
from datetime import UTC, datetime, timedelta

import fastavro
import pytest

from olstream.contract import codec
from olstream.contract.avro_compiled import SchemaCompiler, write_long
from olstream.contract.records import (
    DatasetDeclared,
    Direction,
    Record,
    RunEnded,
    RunError,
    RunRef,
    RunStarted,
    RunStatus,
)
from olstream.shared.errors import DecodeError, InvalidTimeError

T0 = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)

FULL_REF = RunRef("parent-1", "ns", "etl", "2.0", "etl-daily", T0 - timedelta(minutes=5))

RECORDS: list[Record] = [
    RunStarted(
        partition=3,
        offset=2**40,
        append_time=T0,
        engine_run_id="run-ü-1",
        task_id="tenant-7",
        namespace="équipe",
        workflow_type="import_日本語",
        workflow_version="1.2.3",
        workflow_instance="instance/🚀",
        start_time=T0,
        principal="alice@example.com",
        nominal_start_time=T0.replace(hour=0, minute=0, second=0, microsecond=0),
        nominal_end_time=T0.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1),
        parent=FULL_REF,
        root=RunRef("root-only-id"),
        supersedes="run-0",
    ),
    RunStarted(
        partition=0,
        offset=0,
        append_time=T0,
        engine_run_id="r",
        task_id="t",
        namespace="n",
        workflow_type="w",
        workflow_version="v",
        workflow_instance="i",
        start_time=datetime(1970, 1, 1, tzinfo=UTC),  # the earliest time a record carries
    ),
    DatasetDeclared(
        partition=7,
        offset=127,
        append_time=T0,
        engine_run_id="run-1",
        direction=Direction.OUTPUT,
        key="report",
        dataset_namespace="s3://données",
        dataset_name="ventes/été/2024.parquet",
        time=T0,
        version="sha256:abc",
    ),
    DatasetDeclared(
        partition=1,
        offset=128,
        append_time=T0,
        engine_run_id="run-1",
        direction=Direction.INPUT,
        key="",
        dataset_namespace="postgres://db:5432",
        dataset_name="shop.public.orders",
        time=T0,
    ),
    RunEnded(
        partition=2,
        offset=5,
        append_time=T0,
        engine_run_id="run-1",
        status=RunStatus.POISON,
        end_time=T0,
        error=RunError("Ungültige Eingabe «x»", "ValueError", 'Traceback:\n  File "a.py"'),
    ),
    RunEnded(
        partition=2,
        offset=6,
        append_time=T0,
        engine_run_id="run-1",
        status=RunStatus.COMPLETED,
        end_time=T0,
        error=RunError("only a message"),
    ),
    *[
        RunEnded(partition=0, offset=i, append_time=T0, engine_run_id="x", status=s, end_time=T0)
        for i, s in enumerate(RunStatus)
    ],
    RunEnded(1, 2, T0, "late", RunStatus.COMPLETED, datetime.max.replace(tzinfo=UTC)),  # the latest
]


def _fastavro_encode(record: Record) -> bytes:
    schema = codec.current_schemas()[type(record).__name__]
    buf = io.BytesIO()
    buf.write(codec.MAGIC + schema.fingerprint)
    fastavro.schemaless_writer(buf, schema.parsed, codec.to_avro_dict(record))
    return buf.getvalue()


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_type_round_trips(record: Record) -> None:
    data = codec.encode(record)
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == codec.fingerprint_of(type(record).__name__)
    assert codec.peek_record_name(data) == type(record).__name__
    assert codec.decode(data, 0, 0) == record
    assert codec.decode(bytearray(data)) == codec.decode(memoryview(data)) == record
    assert codec.peek_record_name(memoryview(data)) == type(record).__name__


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_bytes_are_exactly_fastavros(record: Record) -> None:
    data = codec.encode(record)
    assert data == _fastavro_encode(record)
    reader = io.BytesIO(data[10:])
    schema = codec.current_schemas()[type(record).__name__].parsed
    assert (
        codec.from_avro_dict(type(record).__name__, fastavro.schemaless_reader(reader, schema, None))
        == record
    )  # type: ignore[arg-type]


def test_offset_encoder_matches_a_full_encode() -> None:
    rng = random.Random(7)
    for record in RECORDS:
        build = codec.offset_encoder(record)
        for offset in [0, 1, 63, 64, 127, 128, 2**31, 2**62, *(rng.getrandbits(50) for _ in range(20))]:
            expected = codec.encode(dataclasses.replace(record, offset=offset))
            assert build(offset) == expected


def test_encode_names_a_bad_field() -> None:
    bad = DatasetDeclared(0, 0, T0, "r", Direction.INPUT, "k", None, "n", T0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dataset_namespace"):
        codec.encode(bad)
    naive = RunEnded(0, 0, datetime(2024, 1, 1), "r", RunStatus.FAILED, T0)
    with pytest.raises(ValueError, match="append_time"):
        codec.encode(naive)
    nested = dataclasses.replace(RECORDS[0], parent=RunRef("p", start_time=datetime(2024, 1, 1)))  # type: ignore[type-var]
    with pytest.raises(ValueError, match=r"cannot encode RunStarted: field 'parent\.start_time'"):
        codec.encode(nested)
    with pytest.raises(ValueError, match=r"field 'parent\.start_time'"):
        codec.offset_encoder(nested)
    with pytest.raises(ValueError, match="partition"):
        codec.offset_encoder(dataclasses.replace(RECORDS[2], partition=2**31))  # type: ignore[type-var]
    with pytest.raises(ValueError, match="field 'status'"):
        codec.encode(dataclasses.replace(RECORDS[4], status="done"))  # type: ignore[type-var]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_the_checking_encoder_writes_the_same_bytes(record: Record) -> None:
    raw = json.loads((codec.schema_dir() / f"{type(record).__name__}.avsc").read_text(encoding="utf-8"))
    buf = bytearray()
    SchemaCompiler().encoder(raw)(buf, record)
    assert bytes(buf) == codec.encode(record)[codec.HEADER_LEN :]


def test_a_record_written_by_the_older_schema_decodes_under_the_current_one() -> None:
    history = codec.schema_dir() / "history" / "RunStarted.v1.avsc"
    old = fastavro.parse_schema(json.loads(history.read_text(encoding="utf-8")), _write_hint=False)
    old_fp = next(fp for fp, ws in codec.known_writer_schemas().items() if ws.source.startswith("history/"))
    assert old_fp != codec.fingerprint_of("RunStarted")
    old_schema = codec.known_writer_schemas()[old_fp]
    data = codec.encode_with(
        old_schema,
        {
            "partition": 4,
            "offset": 10,
            "append_time": T0,
            "engine_run_id": "old-run",
            "task_id": "t",
            "namespace": "ns",
            "workflow_type": "legacy",
            "workflow_version": "0.9",
            "workflow_instance": "legacy-1",
            "principal": None,
            "start_time": T0,
            "nominal_start_time": None,
            "nominal_end_time": None,
            "parent": {
                "engine_run_id": "p",
                "namespace": "ns",
                "workflow_type": "x",
                "workflow_version": "1",
                "workflow_instance": "x-1",
                "start_time": T0,
            },
        },
    )
    assert old is not None
    assert codec.peek_record_name(data) == "RunStarted"
    record = codec.decode(data, 4, 10)
    assert isinstance(record, RunStarted)
    assert record.engine_run_id == "old-run" and record.workflow_type == "legacy"
    assert record.parent == RunRef("p", "ns", "x", "1", "x-1", T0)
    assert record.root is None and record.supersedes is None  # fields added in v2 take their defaults


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "bad magic or too short"),
        (b"\xc3\x01\x00", "bad magic or too short"),
        (b"\x00\x01" + bytes(8) + b"\x00", "bad magic or too short"),
        (b"\xc3\x01" + bytes(8) + b"\x00", "unknown writer-schema fingerprint 0000000000000000"),
    ],
)
def test_bad_headers_raise_decode_error_naming_the_position(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=r"partition 5, offset 42: .*" + reason) as info:
        codec.decode(data, 5, 42)
    assert (info.value.partition, info.value.offset) == (5, 42)


@pytest.mark.parametrize("record", RECORDS[:5], ids=lambda r: type(r).__name__)
def test_truncated_bodies_raise_decode_error(record: Record) -> None:
    data = codec.encode(record)
    for cut in range(codec.HEADER_LEN, len(data)):
        with pytest.raises(DecodeError, match=r"partition 1, offset 2: corrupt"):
            codec.decode(data[:cut], 1, 2)


def _micros(when: datetime) -> int:
    return (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def test_trailing_and_corrupt_bytes_raise_decode_error() -> None:
    data = codec.encode(RECORDS[4])
    with pytest.raises(DecodeError, match=r"offset 9: 3 trailing bytes after the RunEnded body"):
        codec.decode(data + b"abc", 0, 9)

    corrupt_utf8 = codec.encode(RECORDS[3]).replace(b"shop", b"sh\xff\xfe")
    with pytest.raises(DecodeError, match="UnicodeDecodeError"):
        codec.decode(corrupt_utf8, 0, 1)

    # DatasetDeclared ends with the version union (0: null) then the time: make the branch 4.
    good = codec.encode(RECORDS[3])
    time_bytes = bytearray()
    write_long(time_bytes, _micros(T0))
    idx = len(good) - len(time_bytes) - 1
    assert good[idx] == 0
    with pytest.raises(DecodeError, match="union branch"):
        codec.decode(good[:idx] + b"\x04" + good[idx + 1 :], 0, 1)

    body = bytearray(codec.MAGIC + codec.fingerprint_of("RunEnded"))
    for n in (0, 0, _micros(T0)):
        write_long(body, n)
    body += b"\x02x"  # engine_run_id "x"
    write_long(body, 63)  # status index 63: no such symbol
    with pytest.raises(DecodeError, match="corrupt RunEnded body: IndexError"):
        codec.decode(bytes(body), 0, 1)


def test_random_records_match_fastavro_both_ways() -> None:
    rng = random.Random(42)
    alphabet = "abcXYZ09 _-/.:éü日本🚀"

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))

    def maybe(value: object) -> object:
        return value if rng.random() < 0.5 else None

    def when() -> datetime:
        return datetime(1971, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.getrandbits(57))

    for _ in range(300):
        record = RunStarted(
            partition=rng.randint(0, 2**31 - 1),
            offset=rng.getrandbits(63),
            append_time=when(),
            engine_run_id=text(),
            task_id=text(),
            namespace=text(),
            workflow_type=text(),
            workflow_version=text(),
            workflow_instance=text(),
            start_time=when(),
            principal=maybe(text()),  # type: ignore[arg-type]
            nominal_start_time=maybe(when()),  # type: ignore[arg-type]
            parent=maybe(RunRef(text(), maybe(text()), None, maybe(text()), text(), maybe(when()))),  # type: ignore[arg-type]
            root=maybe(RunRef(text())),  # type: ignore[arg-type]
            supersedes=maybe(text()),  # type: ignore[arg-type]
        )
        data = codec.encode(record)
        assert data == _fastavro_encode(record)
        assert codec.decode(data) == record


def test_the_offset_varint_matches_avro_longs() -> None:
    for n in [*range(-70_000, 70_000, 3), 2**21 - 1, 2**21, 2**40, -(2**40), 2**63 - 1, -(2**63)]:
        buf = bytearray()
        write_long(buf, n)
        assert codec._zigzag_varint(n) == bytes(buf), n


@pytest.mark.parametrize("size", [0, 63, 64, 127, 128, 8191, 8192, 20_000])
def test_long_strings_match_fastavro(size: int) -> None:
    record = RunEnded(
        partition=0,
        offset=size,
        append_time=T0,
        engine_run_id="r" * max(size, 1),
        status=RunStatus.FAILED,
        end_time=T0,
        error=RunError("é" * size, None, "s" * size),
    )
    data = codec.encode(record)
    assert data == _fastavro_encode(record)
    assert codec.decode(data) == record


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_values_encoder_matches_a_full_encode(record: Record) -> None:
    names = codec.tail_fields(type(record))
    assert names[0] == "append_time" and "partition" not in names and "offset" not in names
    values = tuple(getattr(record, name) for name in names)
    assert codec.values_encoder(type(record), record.partition, values)(record.offset) == codec.encode(record)


def test_values_encoder_names_a_bad_field() -> None:
    record = RECORDS[2]
    names = codec.tail_fields(DatasetDeclared)
    values = tuple(datetime(2024, 1, 1) if n == "time" else getattr(record, n) for n in names)
    with pytest.raises(ValueError, match="cannot encode DatasetDeclared: field 'time'"):
        codec.values_encoder(DatasetDeclared, 0, values)


def test_an_out_of_range_timestamp_raises_decode_error() -> None:
    schema = codec.current_schemas()["RunEnded"]
    body = io.BytesIO()
    fastavro.schemaless_writer(
        body,
        schema.parsed,
        {
            "partition": 2,
            "offset": 9,
            "append_time": 0,
            "engine_run_id": "r",
            "status": "completed",
            "end_time": 2**62,  # far beyond datetime.max
            "error": None,
        },
    )
    data = codec.MAGIC + schema.fingerprint + body.getvalue()
    with pytest.raises(InvalidTimeError, match="partition 2, offset 9: RunEnded field 'end_time'") as info:
        codec.decode(data, 2, 9)
    assert info.value.field == "end_time" and info.value.error_reason == "invalid_time"
    assert "4611686018427387904 microseconds from the epoch is outside" in str(info.value)
    with pytest.raises(DecodeError, match="partition 2, offset 9: 1 trailing bytes") as undecodable:
        codec.decode(data + b"\x00", 2, 9)  # not a valid body after all: undecodable, not a time
    assert type(undecodable.value) is DecodeError and undecodable.value.error_reason == "undecodable"


def test_plain_decode_errors_say_undecodable() -> None:
    with pytest.raises(DecodeError) as info:
        codec.decode(b"nope", 1, 2)
    assert type(info.value) is DecodeError
    assert info.value.error_reason == "undecodable" and "bad magic" in info.value.reason
