"""The two wire formats of a records-topic value, and turning one into the other (pure: no I/O).

- ``single-object`` (Avro single-object encoding, what the event log stores): ``C3 01`` + the 8-byte
  little-endian CRC-64-AVRO fingerprint of the writer schema + the Avro body.
- ``confluent`` (Confluent's wire format, what Schema Registry readers expect): ``00`` + the 4-byte
  big-endian schema id the registry gave the writer schema + the same Avro body.

The body is the same bytes in both; only the 10-byte or 5-byte header differs. A reader of the
records topic turns a ``confluent`` value back into its ``single-object`` equivalent (the id's
schema's fingerprint) where it reads the message, so everything after that sees the bytes the log
stores (`olstream.contract.codec`, the run directory, explain).
"""

from __future__ import annotations

from olstream.contract.codec import HEADER_LEN, MAGIC

SINGLE_OBJECT = "single-object"
CONFLUENT = "confluent"
WIRE_FORMATS = (SINGLE_OBJECT, CONFLUENT)

CONFLUENT_MAGIC = 0
CONFLUENT_HEADER_LEN = 5


def is_confluent(value: bytes | None) -> bool:
    """Whether a value is Confluent-framed (magic byte 0 and a 4-byte id at least)."""
    return value is not None and len(value) >= CONFLUENT_HEADER_LEN and value[0] == CONFLUENT_MAGIC


def schema_id_of(value: bytes) -> int:
    """The schema id of a Confluent-framed value (`is_confluent` must hold)."""
    return int.from_bytes(value[1:CONFLUENT_HEADER_LEN], "big")


def fingerprint_of_value(value: bytes) -> bytes | None:
    """The 8-byte fingerprint of a single-object value; None when it is not single-object."""
    if len(value) < HEADER_LEN or value[:2] != MAGIC:
        return None
    return value[2:HEADER_LEN]


def to_confluent(single_object: bytes, schema_id: int) -> bytes:
    """The Confluent-framed equivalent of a single-object value whose schema has id `schema_id`."""
    if fingerprint_of_value(single_object) is None:
        raise ValueError("not an Avro single-object value (no C3 01 magic)")
    if not 0 <= schema_id < 1 << 32:
        raise ValueError(f"schema id {schema_id} does not fit in 4 bytes")
    return bytes((CONFLUENT_MAGIC,)) + schema_id.to_bytes(4, "big") + single_object[HEADER_LEN:]


def to_single_object(confluent: bytes, fingerprint: bytes) -> bytes:
    """The single-object equivalent of a Confluent-framed value whose id's schema has `fingerprint`."""
    if not is_confluent(confluent):
        raise ValueError("not a Confluent-framed value (no magic byte 0 and schema id)")
    if len(fingerprint) != 8:
        raise ValueError(f"a fingerprint is 8 bytes, not {len(fingerprint)}")
    return MAGIC + fingerprint + confluent[CONFLUENT_HEADER_LEN:]
