"""The worker's reading of both wire formats (`olstream.streams.framed_input`), without a registry."""

from __future__ import annotations

from typing import Any, cast

import pytest

from olstream.contract import codec, framing, wire
from olstream.contract.records import RunEnded, RunStarted
from olstream.shared.errors import ExitCode
from olstream.shared.schema_registry import SchemaRegistry, SchemaRegistryUnavailable, UnknownSchemaId
from olstream.streams.framed_input import ConfluentWithoutRegistry, InputFraming
from olstream.streams.runtime.directory_reader import read_position
from olstream.streams.runtime.input_codec import SingleObjectValues
from tests.support.fake_message import FakeMessage
from tests.unit.contract.test_codec import RECORDS


class Ids:
    """A registry's answers by id (the real one is tested in tests/integration/shared)."""

    def __init__(self, ids: dict[int, bytes], down: bool = False) -> None:
        self.ids, self.down, self.asked = ids, down, 0

    def fingerprint_of_id(self, schema_id: int) -> bytes:
        self.asked += 1
        if self.down:
            raise SchemaRegistryUnavailable("schema registry http://r: schema id 7: ConnectError")
        if schema_id not in self.ids:
            raise UnknownSchemaId(f"schema registry http://r holds no schema id {schema_id}")
        return self.ids[schema_id]


def framing_with(ids: Ids | None) -> InputFraming:
    return InputFraming(cast(SchemaRegistry, ids))


def test_single_object_values_and_markers_pass_unchanged_without_asking() -> None:
    ids = Ids({})
    reader = framing_with(ids)
    stored = codec.encode(RECORDS[0])
    assert reader.single_object(stored, "t partition 0 offset 1") is stored
    assert reader.single_object(None, "t") is None and reader.single_object(b"", "t") == b""
    assert ids.asked == 0


def test_a_confluent_value_becomes_the_stored_bytes() -> None:
    for record in RECORDS:
        stored = codec.encode(record)
        fp = codec.fingerprint_of(type(record).__name__)
        reader = framing_with(Ids({7: fp}))
        assert reader.single_object(framing.to_confluent(stored, 7), "t") == stored


@pytest.mark.parametrize(
    ("ids", "error", "says"),
    [
        (None, ConfluentWithoutRegistry, "no --schema-registry"),
        (Ids({}), UnknownSchemaId, "holds no schema id 7"),
        (Ids({}, down=True), SchemaRegistryUnavailable, "ConnectError"),
    ],
)
def test_an_unresolved_id_is_an_error_naming_the_record_never_a_decode_error(
    ids: Any, error: type[Exception], says: str
) -> None:
    value = framing.to_confluent(codec.encode(RECORDS[0]), 7)
    with pytest.raises(error, match=says) as caught:
        framing_with(ids).single_object(value, "olstream.eventlog partition 2 offset 41")
    assert "olstream.eventlog partition 2 offset 41" in str(caught.value)


def test_two_framings_read_side_by_side_in_one_process() -> None:
    """Each reader of the records topic is handed its framing: faust's codec and the run directory's
    reader built with one registry resolve a schema id there, those built with another (or with
    none) beside them in the same process answer for theirs."""
    start = RECORDS[0]
    assert isinstance(start, RunStarted)
    stored = codec.encode(start)
    value = framing.to_confluent(stored, 7)
    fp_ended = codec.fingerprint_of(RunEnded.__name__)
    here, there = Ids({7: codec.fingerprint_of(RunStarted.__name__)}), Ids({7: fp_ended})
    mine, theirs, none = framing_with(here), framing_with(there), framing_with(None)

    assert SingleObjectValues("records", mine).loads(value) == stored
    assert SingleObjectValues("records", theirs).loads(value) == framing.to_single_object(value, fp_ended)
    assert SingleObjectValues("records", mine).clone().loads(value) == stored  # faust's copy keeps it
    with pytest.raises(ConfluentWithoutRegistry):
        none.single_object(value, "records")

    headers = [(wire.HEADER_PARTITION, b"2"), (wire.HEADER_OFFSET, b"41"), (wire.HEADER_TYPE, b"RunStarted")]
    message = FakeMessage(0, 9, topic="records", value=value, headers=headers)
    found = read_position(message, mine)
    assert found is not None and (found.body, found.engine_run_id) == (stored, start.engine_run_id)
    other = read_position(message, theirs)  # another schema's bytes: not a start the directory keeps
    assert other is not None and (other.partition, other.offset, other.body) == (2, 41, None)
    assert (here.asked, there.asked) == (3, 2)


def test_the_exit_codes_are_distinct() -> None:
    assert ExitCode.SCHEMA_REGISTRY not in (ExitCode.CONFIG, ExitCode.FAILED, ExitCode.SEND_FAILED)
