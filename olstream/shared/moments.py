"""A moment given on the command line: an ISO time or a duration back from now (`--since 2h`).

Used by `olstream replay` and `olstream errors`, which select Kafka messages by their timestamps.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from olstream.shared.errors import ConfigError

_DURATION = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_moment(text: str, now: datetime, what: str) -> int:
    """`text` as ms since the epoch: a duration back from `now` (`2h`, `1h30m`) or an ISO time."""
    given = text.strip()
    if given and _DURATION.sub("", given) == "":
        delta = timedelta()
        for amount, unit in _DURATION.findall(given):
            delta += timedelta(**{_UNITS[unit]: int(amount)})
        return int((now - delta).timestamp() * 1000)
    try:
        when = datetime.fromisoformat(given.replace("Z", "+00:00") if given.endswith("Z") else given)
    except ValueError:
        raise ConfigError(
            f"{what} {text!r} is neither an ISO time (2024-05-01T12:00:00Z) nor a duration (2h, 30m, 1d)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)
