"""`--until-idle`, decided one way by every command: "consumed to its end" and "quiet long enough".

The worker and the sink are idle when every partition they own is consumed to its end and the
consumed offsets are committed: `consumed_to_end` over the partitions' watermarks and the
positions (committed offsets) they have. The source is idle when it is caught up with the event
log and nothing new has arrived for a quiet period (`QuietPeriod`). (The demo's wait is not
`--until-idle`: it follows its own progress bars until every run's terminal event is delivered.)
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def behind(bounds: Mapping[K, tuple[int, int]], positions: Mapping[K, int | None]) -> list[K]:
    """The partitions not consumed to their end.

    `bounds`: partition -> (low, high) watermarks. `positions`: partition -> the next offset to
    read (a committed offset); None or absent means nothing committed, which counts as the low
    watermark. An empty partition (high <= low) is always at its end.
    """
    late = []
    for key, (low, high) in bounds.items():
        if high <= low:
            continue
        position = positions.get(key)
        if position is None or position < 0:
            position = low
        if position < high:
            late.append(key)
    return late


def consumed_to_end(bounds: Mapping[K, tuple[int, int]], positions: Mapping[K, int | None]) -> bool:
    """True when no partition is `behind`."""
    return not behind(bounds, positions)


@dataclass
class QuietPeriod:
    """True once `seconds` have passed since the last activity (times from `time.monotonic()`)."""

    seconds: float
    last_activity: float

    def note_activity(self, now: float) -> None:
        self.last_activity = now

    def over(self, now: float) -> bool:
        return now - self.last_activity >= self.seconds
