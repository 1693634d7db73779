"""A validating Avro body walker, compiled once per writer schema into straight-line Python.

The source connector's ``--check full`` must know that a stored body parses to its end under
its writer schema and names its own (partition, offset); it needs none of the values. The
walker generated here reads every varint, string (UTF-8 checked), enum and union index and
timestamp (range checked as a datetime would) without building a dict, so it is several times
cheaper than ``fastavro.schemaless_reader``.

It is never more lenient than fastavro: it accepts only bodies fastavro reads to the end (and
a few it would read it refuses: an ``int`` outside 32 bits, a varint longer than 10 bytes).
Callers treat ``None`` as "not sure" and ask fastavro for the verdict and the reason, so what
is accepted and every error message stay exactly fastavro's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BodyCheck = Callable[[bytes, int], "tuple[int, int, int] | None"]
"""(data, body start) -> (partition, offset, end of the body), or None when unsure."""

# timestamp-micros values a datetime can hold (0001-01-01 .. 9999-12-31T23:59:59.999999)
MIN_MICROS = -62_135_596_800_000_000
MAX_MICROS = 253_402_300_799_999_999
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class _Unsure(Exception):
    """Raised inside a walker for a malformed varint."""


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint of at most 10 bytes at `pos`: (value, position after it)."""
    b = data[pos]
    n, shift = b & 0x7F, 7
    while b & 0x80:
        pos += 1
        if shift > 63:
            raise _Unsure
        b = data[pos]
        n |= (b & 0x7F) << shift
        shift += 7
    value = (n >> 1) ^ -(n & 1)
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise _Unsure
    return value, pos + 1


class UnsupportedSchema(ValueError):
    """The schema uses an Avro feature the walker compiler does not handle."""


class _Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.named: dict[str, Any] = {}

    def _resolve(self, schema: Any) -> Any:
        if isinstance(schema, str) and schema not in ("int", "long", "string", "null"):
            short = schema.rsplit(".", 1)[-1]
            if short not in self.named:
                raise UnsupportedSchema(f"unknown named type {schema!r}")
            return self.named[short]
        return schema

    def _register(self, schema: dict[str, Any]) -> None:
        self.named[str(schema["name"]).rsplit(".", 1)[-1]] = schema

    def long(self, ind: str) -> None:
        """Leaves the value in `v` (one- and two-byte varints inline)."""
        self.lines += [
            f"{ind}b = data[pos]",
            f"{ind}if b < 128:",
            f"{ind}    v = (b >> 1) ^ -(b & 1)",
            f"{ind}    pos += 1",
            f"{ind}elif data[pos + 1] < 128:",
            f"{ind}    n = (b & 127) | (data[pos + 1] << 7)",
            f"{ind}    v = (n >> 1) ^ -(n & 1)",
            f"{ind}    pos += 2",
            f"{ind}else:",
            f"{ind}    v, pos = read_long(data, pos)",
        ]

    def skip_long(self, ind: str) -> None:
        """Steps over a varint of at most 8 bytes (|value| < 2**55): unsure about longer ones."""
        self.lines += [
            f"{ind}m = ~int.from_bytes(data[pos : pos + 8], 'little') & 0x8080808080808080",
            f"{ind}if not m: return None",
            f"{ind}pos += (m & -m).bit_length() >> 3",
            f"{ind}if pos > end: return None",
        ]

    def value(self, schema: Any, ind: str) -> None:
        schema = self._resolve(schema)
        if schema == "null":
            self.lines.append(f"{ind}pass")
        elif schema == "int":
            self.long(ind)
            self.lines.append(f"{ind}if not -2147483648 <= v <= 2147483647: return None")
        elif schema == "long":
            self.skip_long(ind)
        elif schema == "string":
            self.lines += [
                f"{ind}b = data[pos]",
                f"{ind}if b < 128:",
                f"{ind}    if b & 1: return None",
                f"{ind}    pos += 1",
                f"{ind}    e = pos + (b >> 1)",
                f"{ind}elif data[pos + 1] < 128:",
                f"{ind}    if b & 1: return None",
                f"{ind}    e = pos + 2 + (((b & 127) | (data[pos + 1] << 7)) >> 1)",
                f"{ind}    pos += 2",
                f"{ind}else:",
                f"{ind}    v, pos = read_long(data, pos)",
                f"{ind}    if v < 0: return None",
                f"{ind}    e = pos + v",
                f"{ind}if e > end: return None",
                f"{ind}if e > pos: data[pos:e].decode()",
                f"{ind}pos = e",
            ]
        elif isinstance(schema, list):
            if len(schema) > 63:
                raise UnsupportedSchema("a union of more than 63 branches")
            self.lines += [f"{ind}b = data[pos]", f"{ind}pos += 1"]
            for i, branch in enumerate(schema):  # a one-byte zig-zag index: 2 * i
                self.lines.append(f"{ind}{'if' if i == 0 else 'elif'} b == {2 * i}:")
                self.value(branch, ind + "    ")
            self.lines.append(f"{ind}else: return None")
        elif isinstance(schema, dict):
            kind = schema["type"]
            if kind == "long" and schema.get("logicalType") in ("timestamp-micros", None):
                # at most 8 bytes: |value| < 2**55, inside the datetime range
                self.skip_long(ind)
            elif kind == "enum" and len(schema["symbols"]) <= 63:
                self._register(schema)
                self.lines += [
                    f"{ind}b = data[pos]",
                    f"{ind}if b & 1 or b >= {2 * len(schema['symbols'])}: return None",
                    f"{ind}pos += 1",
                ]
            elif kind == "record":
                self._register(schema)
                for field in schema["fields"]:
                    self.value(field["type"], ind)
            elif isinstance(kind, str) and kind in ("int", "long", "string", "null") and len(schema) == 1:
                self.value(kind, ind)
            else:
                raise UnsupportedSchema(f"no walker for {schema!r}")
        else:
            raise UnsupportedSchema(f"no walker for {schema!r}")


def compile_body_check(schema: dict[str, Any]) -> BodyCheck:
    """A walker for a record schema whose first fields are ``partition`` (int) and ``offset`` (long)."""
    fields = schema.get("fields") or []
    if [f["name"] for f in fields[:2]] != ["partition", "offset"] or [
        f["type"] for f in fields[:2]
    ] != ["int", "long"]:
        raise UnsupportedSchema("the record does not start with partition (int) and offset (long)")
    em = _Emitter()
    em._register(schema)
    em.value("int", "        ")
    em.lines.append("        p = v")
    em.long("        ")
    em.lines.append("        o = v")
    for field in fields[2:]:
        em.value(field["type"], "        ")
    source = "\n".join(
        [
            "def check(data, pos):",
            "    end = len(data)",
            "    try:",
            *em.lines,
            "    except (IndexError, UnicodeDecodeError, _Unsure):",
            "        return None",
            "    return p, o, pos",
        ]
    )
    namespace: dict[str, Any] = {"read_long": read_long, "_Unsure": _Unsure}
    exec(compile(source, f"<avro body check {schema.get('name')}>", "exec"), namespace)
    check: BodyCheck = namespace["check"]
    return check
