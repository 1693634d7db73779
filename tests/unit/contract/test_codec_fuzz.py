"""Fuzzing the decoder: random bytes and mutated encodings raise only DecodeError, never anything else.

A record that does decode carries only times a record can carry (`contract.times`).
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from olstream.contract import codec
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
from olstream.contract.times import record_time_problems
from olstream.shared.errors import DecodeError, InvalidTimeError, OlstreamError

FUZZ = settings(
    max_examples=250,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
FINGERPRINTS = sorted(codec.known_writer_schemas())
OLDER = [ws for ws in codec.known_writer_schemas().values() if ws.source.startswith("history/")]

texts = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(codec="utf-8"), min_size=100, max_size=400),
    st.sampled_from(["", "a", "🚀", "\x00", "\u202e", "é" * 70]),
)
maybe_texts = st.none() | texts
times = st.one_of(
    st.datetimes(timezones=st.just(UTC)),  # 0001..9999, the years before 1970 included
    st.datetimes(min_value=datetime(1969, 12, 31), max_value=datetime(1970, 1, 2), timezones=st.just(UTC)),
)
refs = st.builds(
    RunRef, texts, maybe_texts, maybe_texts, maybe_texts, maybe_texts, st.none() | times, maybe_texts
)
positions = {"partition": st.integers(-(2**31), 2**31 - 1), "offset": st.integers(-(2**63), 2**63 - 1)}

records: st.SearchStrategy[Record] = st.one_of(
    st.builds(
        RunStarted,
        append_time=times,
        engine_run_id=texts,
        task_id=texts,
        namespace=texts,
        workflow_type=texts,
        workflow_version=texts,
        workflow_instance=texts,
        start_time=times,
        principal=maybe_texts,
        nominal_start_time=st.none() | times,
        nominal_end_time=st.none() | times,
        parent=st.none() | refs,
        root=st.none() | refs,
        supersedes=maybe_texts,
        **positions,
    ),
    st.builds(
        DatasetDeclared,
        append_time=times,
        engine_run_id=texts,
        direction=st.sampled_from(Direction),
        key=texts,
        dataset_namespace=texts,
        dataset_name=texts,
        time=times,
        version=maybe_texts,
        **positions,
    ),
    st.builds(
        RunEnded,
        append_time=times,
        engine_run_id=texts,
        status=st.sampled_from(RunStatus),
        end_time=times,
        error=st.none() | st.builds(RunError, texts, maybe_texts, maybe_texts),
        **positions,
    ),
)


@st.composite
def encodings(draw: st.DrawFn) -> bytes:
    """A valid record's bytes: under its current schema, or a RunStarted under an older one."""
    record = draw(records)
    if isinstance(record, RunStarted) and draw(st.booleans()):
        return codec.encode_with(draw(st.sampled_from(OLDER)), codec.to_avro_dict(record))
    return codec.encode(record)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(encodings()))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        # mostly in the body: a mutated header only ever gives "bad magic" or "unknown fingerprint"
        low = 0 if len(data) <= codec.HEADER_LEN or draw(st.integers(0, 9)) == 0 else codec.HEADER_LEN
        at = draw(st.integers(low, max(len(data) - 1, low)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, draw(st.integers(0, 255))]))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=9))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 4))]
        elif op == "truncate":
            del data[at:]
    return bytes(data)


def _decode_or_decode_error(data: bytes) -> Record | None:
    """The record, or None for a DecodeError; anything else fails the test (hypothesis shrinks it)."""
    try:
        record = codec.decode(data, 3, 17)
    except DecodeError as e:
        assert isinstance(e, OlstreamError)
        assert str(e).startswith("cannot decode record at partition 3, offset 17: ")
        assert e.error_reason in ("undecodable", "invalid_time")
        assert isinstance(e, InvalidTimeError) == (e.error_reason == "invalid_time")
        return None
    assert type(record) in RECORD_TYPES.values()
    assert record_time_problems(record) == []
    return record


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    _decode_or_decode_error(data)


@FUZZ
@given(st.sampled_from(FINGERPRINTS), st.binary(max_size=300))
def test_random_bodies_after_a_known_header_raise_only_decode_error(fingerprint: bytes, body: bytes) -> None:
    _decode_or_decode_error(codec.MAGIC + fingerprint + body)


@FUZZ
@given(mutated())
def test_mutated_encodings_raise_only_decode_error(data: bytes) -> None:
    record = _decode_or_decode_error(data)
    if record is not None and data[2 : codec.HEADER_LEN] == codec.fingerprint_of(type(record).__name__):
        assert codec.decode(data, 3, 17) == record  # deterministic


@FUZZ
@given(encodings())
def test_valid_encodings_decode_unless_a_time_is_out_of_range(data: bytes) -> None:
    try:
        record = codec.decode(data, 1, 2)
    except InvalidTimeError as e:
        assert e.field and f"field {e.field!r}: " in str(e)
        return
    assert record_time_problems(record) == []
