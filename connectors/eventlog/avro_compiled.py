"""Avro binary encoders/decoders compiled once per schema into plain Python closures.

fastavro's ``schemaless_writer``/``schemaless_reader`` re-parse the schema on every call
(tens of microseconds per record). The event-log records have small fixed schemas, so this
module turns a schema into a tree of closures once and then encodes straight from the record
dataclasses and decodes straight into them. The bytes are exactly fastavro's (the codec tests
compare both on many records). Supported: int, long, string, timestamp-micros, enum, record,
named-type references and ``["null", X]`` unions: everything ``avro/*.avsc`` uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Any

Encoder = Callable[[bytearray, Any], None]
Decoder = Callable[[bytes, int], tuple[Any, int]]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICRO = timedelta(microseconds=1)


class UnsupportedSchema(ValueError):
    """The schema uses an Avro feature this compiler does not handle."""


def write_long(buf: bytearray, n: int) -> None:
    n = (n << 1) ^ (n >> 63)
    while n & ~0x7F:
        buf.append((n & 0x7F) | 0x80)
        n >>= 7
    buf.append(n)


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    pos += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos


def _write_string(buf: bytearray, value: Any) -> None:
    raw = value.encode("utf-8")
    write_long(buf, len(raw))
    buf += raw


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    size, pos = read_long(data, pos)
    end = pos + size
    if size < 0 or end > len(data):
        raise EOFError(f"string of {size} bytes runs past the end of the record")
    return data[pos:end].decode("utf-8"), end


def _write_timestamp_micros(buf: bytearray, value: Any) -> None:
    if value.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no timezone")
    write_long(buf, (value - EPOCH) // _ONE_MICRO)


def _read_timestamp_micros(data: bytes, pos: int) -> tuple[datetime, int]:
    micros, pos = read_long(data, pos)
    return EPOCH + timedelta(microseconds=micros), pos


def _write_int(buf: bytearray, value: Any) -> None:
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"int {value} out of the Avro int range")
    write_long(buf, value)


def _write_long(buf: bytearray, value: Any) -> None:
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"long {value} out of the Avro long range")
    write_long(buf, value)


class SchemaCompiler:
    """Compiles Avro schemas (raw JSON dicts) to encoders and decoders.

    `record_types` maps a record's short name to the class to build when decoding (its
    fields are passed as keyword arguments); `enum_types` maps an enum's short name to a
    callable turning a symbol into the Python value. Records encode by attribute access.
    """

    def __init__(
        self,
        record_types: Mapping[str, Callable[..., Any]],
        enum_types: Mapping[str, Callable[[str], Any]],
    ) -> None:
        self._record_types = record_types
        self._enum_types = enum_types
        self._named: dict[str, Any] = {}

    @staticmethod
    def _short(name: str) -> str:
        return name.rsplit(".", 1)[-1]

    def _register(self, schema: dict[str, Any]) -> None:
        self._named[self._short(str(schema["name"]))] = schema

    def _resolve(self, schema: Any) -> Any:
        if isinstance(schema, str) and schema not in ("int", "long", "string", "null"):
            try:
                return self._named[self._short(schema)]
            except KeyError as e:
                raise UnsupportedSchema(f"unknown named type {schema!r}") from e
        return schema

    def encoder(self, schema: Any) -> Encoder:
        schema = self._resolve(schema)
        if schema == "int":
            return _write_int
        if schema == "long":
            return _write_long
        if schema == "string":
            return _write_string
        if isinstance(schema, list):
            return self._union_encoder(schema)
        if isinstance(schema, dict):
            kind = schema["type"]
            if kind == "long" and schema.get("logicalType") == "timestamp-micros":
                return _write_timestamp_micros
            if kind == "enum":
                self._register(schema)
                index = {symbol: i for i, symbol in enumerate(schema["symbols"])}

                def write_enum(buf: bytearray, value: Any) -> None:
                    write_long(buf, index[value])

                return write_enum
            if kind == "record":
                self._register(schema)
                fields = [
                    (attrgetter(f["name"]), f["name"], self.encoder(f["type"])) for f in schema["fields"]
                ]

                def write_record(buf: bytearray, value: Any) -> None:
                    for get, name, write in fields:
                        try:
                            write(buf, get(value))
                        except (AttributeError, TypeError, KeyError, ValueError) as e:
                            raise ValueError(f"field {name!r}: {type(e).__name__}: {e}") from e

                return write_record
            return self.encoder(kind)
        raise UnsupportedSchema(f"cannot compile an encoder for {schema!r}")

    def _union_encoder(self, branches: list[Any]) -> Encoder:
        if len(branches) != 2 or branches[0] != "null":
            raise UnsupportedSchema(f"only ['null', X] unions are supported, not {branches!r}")
        write_value = self.encoder(branches[1])

        def write_optional(buf: bytearray, value: Any) -> None:
            if value is None:
                buf.append(0)
            else:
                buf.append(2)  # zigzag(1): the second branch
                write_value(buf, value)

        return write_optional

    def decoder(self, schema: Any) -> Decoder:
        schema = self._resolve(schema)
        if schema in ("int", "long"):
            return read_long
        if schema == "string":
            return _read_string
        if isinstance(schema, list):
            return self._union_decoder(schema)
        if isinstance(schema, dict):
            kind = schema["type"]
            if kind == "long" and schema.get("logicalType") == "timestamp-micros":
                return _read_timestamp_micros
            if kind == "enum":
                self._register(schema)
                convert = self._enum_types.get(self._short(schema["name"]), str)
                values = [convert(symbol) for symbol in schema["symbols"]]

                def read_enum(data: bytes, pos: int) -> tuple[Any, int]:
                    i, pos = read_long(data, pos)
                    if i < 0:
                        raise IndexError(f"enum index {i} is negative")
                    return values[i], pos

                return read_enum
            if kind == "record":
                self._register(schema)
                build = self._record_types[self._short(schema["name"])]
                fields = [(f["name"], self.decoder(f["type"])) for f in schema["fields"]]

                def read_record(data: bytes, pos: int) -> tuple[Any, int]:
                    values: dict[str, Any] = {}
                    for name, read in fields:
                        values[name], pos = read(data, pos)
                    return build(**values), pos

                return read_record
            return self.decoder(kind)
        raise UnsupportedSchema(f"cannot compile a decoder for {schema!r}")

    def _union_decoder(self, branches: list[Any]) -> Decoder:
        if len(branches) != 2 or branches[0] != "null":
            raise UnsupportedSchema(f"only ['null', X] unions are supported, not {branches!r}")
        read_value = self.decoder(branches[1])

        def read_optional(data: bytes, pos: int) -> tuple[Any, int]:
            branch = data[pos]
            if branch == 0:
                return None, pos + 1
            if branch == 2:
                return read_value(data, pos + 1)
            raise ValueError(f"union branch byte {branch} is not 0 (null) or 2 (value)")

        return read_optional
