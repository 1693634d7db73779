"""The worker's reading of both wire formats (`olstream.streams.framed_input`), without a registry."""

from __future__ import annotations

from typing import Any, cast

import pytest

from olstream.contract import codec, framing
from olstream.shared.errors import ExitCode
from olstream.shared.schema_registry import SchemaRegistry, SchemaRegistryUnavailable, UnknownSchemaId
from olstream.streams.framed_input import ConfluentWithoutRegistry, InputFraming
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


def test_the_exit_codes_are_distinct() -> None:
    assert ExitCode.SCHEMA_REGISTRY not in (ExitCode.CONFIG, ExitCode.FAILED, ExitCode.SEND_FAILED)
