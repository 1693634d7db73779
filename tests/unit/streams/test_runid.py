from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from olstream.streams.runid import epoch_millis, run_id, timestamp_millis

T = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


def test_same_identity_same_id() -> None:
    assert run_id("ns", "etl", "inst", "r1", T) == run_id("ns", "etl", "inst", "r1", T)


def test_version_7_layout_and_variant() -> None:
    u = uuid.UUID(run_id("ns", "etl", "inst", "r1", T))
    assert u.version == 7
    assert u.variant == uuid.RFC_4122
    assert str(u) == run_id("ns", "etl", "inst", "r1", T)


def test_timestamp_is_start_time_in_millis() -> None:
    rid = run_id("ns", "etl", "inst", "r1", T)
    assert timestamp_millis(rid) == epoch_millis(T) == 1767323045123


def test_same_instant_in_another_offset_gives_same_id() -> None:
    other = T.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert run_id("ns", "etl", "inst", "r1", other) == run_id("ns", "etl", "inst", "r1", T)


@pytest.mark.parametrize(
    "parts",
    [
        ("ns2", "etl", "inst", "r1"),
        ("ns", "etl2", "inst", "r1"),
        ("ns", "etl", "inst2", "r1"),
        ("ns", "etl", "inst", "r2"),
        ("nse", "tl", "inst", "r1"),  # no ambiguity from concatenation
    ],
)
def test_every_identity_part_changes_the_random_bits(parts: tuple[str, str, str, str]) -> None:
    base = uuid.UUID(run_id("ns", "etl", "inst", "r1", T)).bytes
    other = uuid.UUID(run_id(*parts, T)).bytes
    assert base[:6] == other[:6]
    assert base[6:] != other[6:]


def test_non_ascii_identity() -> None:
    assert uuid.UUID(run_id("ñs", "流程", "instänce", "r1", T)).version == 7


def test_ids_sort_by_start_time() -> None:
    ids = [run_id("ns", "etl", f"i{k}", f"r{k}", T + timedelta(milliseconds=k)) for k in range(50)]
    assert sorted(ids) == ids


def test_naive_datetime_is_utc() -> None:
    assert run_id("ns", "etl", "i", "r", T.replace(tzinfo=None)) == run_id("ns", "etl", "i", "r", T)


def test_before_epoch_rejected() -> None:
    with pytest.raises(ValueError, match="48-bit"):
        run_id("ns", "etl", "i", "r", datetime(1969, 1, 1, tzinfo=UTC))
