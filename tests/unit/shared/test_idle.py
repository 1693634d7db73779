"""`--until-idle`'s two definitions: consumed to its end, and quiet long enough."""

from __future__ import annotations

from olstream.shared.idle import QuietPeriod, behind, consumed_to_end


def test_a_partition_is_at_its_end_when_its_position_reached_the_high_watermark() -> None:
    bounds = {0: (0, 10), 1: (5, 5), 2: (3, 8)}
    assert behind(bounds, {0: 10, 2: 7}) == [2]
    assert consumed_to_end(bounds, {0: 10, 2: 8})


def test_no_commit_counts_as_the_low_watermark() -> None:
    assert behind({0: (0, 4)}, {}) == [0]
    assert behind({0: (0, 4)}, {0: None}) == [0]
    assert behind({0: (0, 4)}, {0: -1001}) == [0]  # librdkafka's OFFSET_INVALID
    assert consumed_to_end({0: (4, 4)}, {})  # emptied by retention: nothing to consume


def test_quiet_period() -> None:
    quiet = QuietPeriod(2.0, last_activity=10.0)
    assert not quiet.over(11.9) and quiet.over(12.0)
    quiet.note_activity(12.0)
    assert not quiet.over(13.0)
