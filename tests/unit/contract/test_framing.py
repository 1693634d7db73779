"""The two wire formats of a records-topic value, and the re-framing between them (no I/O)."""

from __future__ import annotations

import pytest

from olstream.contract import codec, framing
from olstream.contract.records import Record
from olstream.contract.schema_files import schema_texts
from olstream.shared.schema_registry import fingerprint_of_text, schemas_in_order
from tests.unit.contract.test_codec import RECORDS


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_confluent_and_back_is_the_same_bytes_and_record(record: Record) -> None:
    stored = codec.encode(record)
    confluent = framing.to_confluent(stored, 70_000)
    assert confluent[:5] == b"\x00" + (70_000).to_bytes(4, "big")
    assert confluent[5:] == stored[codec.HEADER_LEN :]  # the body unchanged
    assert framing.is_confluent(confluent) and not framing.is_confluent(stored)
    assert framing.schema_id_of(confluent) == 70_000
    fp = framing.fingerprint_of_value(stored)
    assert fp == codec.fingerprint_of(type(record).__name__)
    back = framing.to_single_object(confluent, fp)
    assert back == stored
    assert codec.decode(back, record.partition, record.offset) == record


def test_what_is_neither_is_refused_or_passed_over() -> None:
    assert (
        not framing.is_confluent(None) and not framing.is_confluent(b"") and not framing.is_confluent(b"\0\0")
    )
    assert framing.fingerprint_of_value(b"\x00\x00\x00\x00\x01body") is None
    with pytest.raises(ValueError, match="single-object"):
        framing.to_confluent(b"\x00\x00\x00\x00\x01body", 1)
    with pytest.raises(ValueError, match="4 bytes"):
        framing.to_confluent(codec.encode(RECORDS[0]), 1 << 32)
    with pytest.raises(ValueError, match="Confluent"):
        framing.to_single_object(codec.encode(RECORDS[0]), b"12345678")
    with pytest.raises(ValueError, match="8 bytes"):
        framing.to_single_object(b"\x00\x00\x00\x00\x01body", b"1234")


def test_the_registry_gets_every_writer_schema_oldest_first_with_its_fingerprint() -> None:
    schemas = schemas_in_order(schema_texts())
    assert set(s.fingerprint for s in schemas) == set(codec.known_writer_schemas())
    started = [s.source for s in schemas if s.full_name == "io.olstream.eventlog.RunStarted"]
    assert started == ["history/RunStarted.v1.avsc", "history/RunStarted.v2.avsc", "RunStarted.avsc"]
    for s in schemas:  # what a worker computes from the text the registry gives back
        assert fingerprint_of_text(s.text) == s.fingerprint
    assert {s.full_name for s in schemas} == {
        f"io.olstream.eventlog.{n}" for n in ("RunStarted", "DatasetDeclared", "RunEnded")
    }
