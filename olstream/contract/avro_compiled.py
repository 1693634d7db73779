"""A checking Avro encoder compiled once per schema into plain Python closures.

The codec's fast path is the straight-line code of `avro_codegen`; when it fails, this
encoder re-runs on the same record to say which field (``parent.start_time``...) does not fit
the schema. It encodes straight from the record dataclasses, with the same bytes as fastavro.
Supported: int, long, string, timestamp-micros, enum, record, named-type references and
``["null", X]`` unions: everything ``avro/*.avsc`` uses.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Any

Encoder = Callable[[bytearray, Any], None]
Decoder = Callable[[bytes, int], tuple[Any, int]]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICRO = timedelta(microseconds=1)


class UnsupportedSchema(ValueError):
    """The schema uses an Avro feature this compiler does not handle."""


class FieldError(ValueError):
    """A value does not fit its field; `path` names it (``parent.start_time``)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"field {path!r}: {reason}")


def write_long(buf: bytearray, n: int) -> None:
    n = (n << 1) ^ (n >> 63)
    while n & ~0x7F:
        buf.append((n & 0x7F) | 0x80)
        n >>= 7
    buf.append(n)


def _write_string(buf: bytearray, value: Any) -> None:
    raw = value.encode("utf-8")
    write_long(buf, len(raw))
    buf += raw


def _write_timestamp_micros(buf: bytearray, value: Any) -> None:
    if value.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no timezone")
    write_long(buf, (value - EPOCH) // _ONE_MICRO)


def _write_int(buf: bytearray, value: Any) -> None:
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"int {value} out of the Avro int range")
    write_long(buf, value)


def _write_long(buf: bytearray, value: Any) -> None:
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"long {value} out of the Avro long range")
    write_long(buf, value)


class SchemaCompiler:
    """Compiles Avro schemas (raw JSON dicts) to checking encoders.

    Records encode by attribute access; an enum value is looked up by its symbol (a StrEnum
    member or a plain string). Errors are ValueErrors naming the field path.
    """

    def __init__(self) -> None:
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
                        except FieldError as e:
                            raise FieldError(f"{name}.{e.path}", e.reason) from e
                        except (AttributeError, TypeError, KeyError, ValueError, OverflowError) as e:
                            raise FieldError(name, f"{type(e).__name__}: {e}") from e

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
