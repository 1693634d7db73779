"""Java `.properties` text, read and written as `java.util.Properties` does (ISO 8859-1 files,
backslash escapes and continuations, `\\uXXXX` for the rest): the files Kafka's tools and
MirrorMaker 2 read, and the --kafka-config files of every service."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_NAMED = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}


def _continues(line: str) -> bool:
    """A line ending in an odd number of backslashes continues on the next one."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str, where: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"{where}: malformed \\uxxxx escape")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    # surrogate pairs written as two \uXXXX escapes make one character
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")


def _split_key(line: str) -> tuple[str, str]:
    """(raw key, raw value) of a logical line: the key ends at the first unescaped `=`, `:` or blank."""
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\":
            i += 2
            continue
        if char in "=:" or char in _WHITESPACE:
            break
        i += 1
    key, rest = line[:i], line[i:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":") and rest:
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def parse_properties(text: str, what: str = "properties") -> dict[str, str]:
    """The keys and values of a Java .properties text, as `Properties.load` reads them.

    Raises ValueError naming the line of a malformed escape (never its text: it may be a secret).
    """
    lines = re.split(r"\r\n|\r|\n", text)
    props: dict[str, str] = {}
    i = 0
    while i < len(lines):
        number = i + 1
        line = lines[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(_WHITESPACE)
            i += 1
        if _continues(line):
            line = line[:-1]
        key, value = _split_key(line)
        where = f"{what} line {number}"
        props[_unescape(key, where)] = _unescape(value, where)
    return props


def _escape(text: str, is_key: bool) -> str:
    out: list[str] = []
    for i, char in enumerate(text):
        if char in _NAMED:
            out.append(_NAMED[char])
        elif char == " " and (is_key or i == 0):
            out.append("\\ ")
        elif is_key and (char in "=:" or (i == 0 and char in "#!")):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) > 0x7E:
            units = char.encode("utf-16-be", "surrogatepass")
            out += [f"\\u{int.from_bytes(units[j : j + 2], 'big'):04X}" for j in range(0, len(units), 2)]
        else:
            out.append(char)
    return "".join(out)


def render_properties(props: Mapping[str, str], header: Iterable[str] = ()) -> str:
    """Java .properties text that `Properties.load` reads back as `props` (a regex's `\\.` as `\\\\.`)."""
    lines = [f"# {line}" if line else "#" for line in header]
    lines += [f"{_escape(key, True)}={_escape(value, False)}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def read_properties(path: Path, what: str) -> dict[str, str]:
    """A Java .properties file (read as Java reads it: ISO 8859-1); ValueError when unreadable."""
    try:
        text = path.read_bytes().decode("latin-1")
    except OSError as e:
        raise ValueError(f"cannot read {what} {path}: {e.strerror or e}") from e
    return parse_properties(text, f"{what} {path}")


