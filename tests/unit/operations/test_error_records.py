"""The pure half of `olstream errors`: summing up, selecting and printing error records safely."""

from __future__ import annotations

from olstream.operations.error_records import (
    NO_REASON,
    ErrorRecord,
    Selection,
    describe,
    format_ms,
    safe_text,
    summarize,
)
from olstream.shared import deadletter


def record(
    topic: str = "t", offset: int = 0, ms: int = 1_000, reason: str | None = "rejected", **extra: bytes
) -> ErrorRecord:
    headers: list[tuple[str, bytes | None]] = []
    if reason is not None:
        headers.append((deadletter.ERROR, reason.encode()))
    headers.extend(extra.items())
    return ErrorRecord(topic, 0, offset, ms, b"payload", tuple(headers))


def test_summary_is_reason_by_count_with_first_and_last_time_per_topic() -> None:
    rows = summarize(
        [
            record("a", 0, 5_000, "rejected"),
            record("a", 1, 2_000, "rejected"),
            record("a", 2, 9_000, "retries_exhausted"),
            record("b", 0, 7_000, None),
        ]
    )
    assert [(r.topic, r.reason, r.records, r.first_ms, r.last_ms) for r in rows] == [
        ("a", "rejected", 2, 2_000, 5_000),
        ("a", "retries_exhausted", 1, 9_000, 9_000),
        ("b", NO_REASON, 1, 7_000, 7_000),
    ]


def test_a_cut_copy_or_a_too_large_record_is_not_redrivable_from_its_copy() -> None:
    cut = record(reason="undecodable", **{deadletter.SIZE: b"100000"})
    large = record(reason=deadletter.TOO_LARGE, **{deadletter.SIZE: b"7"})
    whole = record(reason="undecodable", **{deadletter.SIZE: b"7"})
    assert (cut.copy_cut, cut.from_copy) == (True, False)
    assert (large.copy_cut, large.from_copy) == (False, False)
    assert (whole.copy_cut, whole.from_copy) == (False, True)
    rows = summarize([cut, large, whole])
    assert [(r.reason, r.records, r.not_from_copy) for r in rows] == [
        ("undecodable", 2, 1),
        (deadletter.TOO_LARGE, 1, 1),
    ]
    assert "not re-drivable from this copy" in "\n".join(describe(cut))
    assert "not re-drivable" not in "\n".join(describe(whole))


def test_safe_text_escapes_non_printables_and_cuts() -> None:
    assert safe_text(b"ab\x00\n\\\xff", 100) == "ab\\x00\\n\\\\\\xff"
    assert safe_text(b"abcdef", 3) == "abc... (3 more bytes)"
    assert safe_text("é".encode(), 10) == "\\xc3\\xa9"


def test_describe_names_the_log_position_and_every_header() -> None:
    r = ErrorRecord(
        "olstream.stream.errors",
        2,
        17,
        1_700_000_000_000,
        b"\x00\x01body",
        (
            (deadletter.ERROR, b"invalid_namespace"),
            (deadletter.ERROR_DETAIL, b"field namespace"),
            ("olstream.partition", b"3"),
            ("olstream.offset", b"41"),
            ("empty", None),
        ),
    )
    lines = describe(r)
    assert lines[0] == "olstream.stream.errors[2]@17  2023-11-14T22:13:20.000Z"
    assert "  event log position: partition 3, offset 41" in lines
    assert "  olstream.error: invalid_namespace" in lines
    assert "  empty: (null)" in lines
    assert lines[-1] == "  payload (6 bytes, whole): \\x00\\x01body"


def test_selection_matches_every_given_field() -> None:
    r = record(offset=5, reason="rejected")
    assert Selection().matches(r)
    assert Selection(reason="rejected", partition=0, from_offset=5, to_offset=5).matches(r)
    assert not Selection(reason="other").matches(r)
    assert not Selection(partition=1).matches(r)
    assert not Selection(from_offset=6).matches(r)
    assert not Selection(to_offset=4).matches(r)


def test_a_message_without_a_time_prints_a_dash() -> None:
    assert format_ms(0) == "-"
