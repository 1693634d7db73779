"""Settings of the event log's commands: declared once, resolved by the shared resolver."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from olstream.eventlog.simulate import BASE_TIME
from olstream.shared.config import LOG_FORMAT, LOG_LEVEL, Resolved, Setting, at_least, resolve
from olstream.shared.errors import ConfigError

LOG_URL = Setting(
    "log_url", None, "event log URL: sqlite:///path/events.db or postgresql://...", flag="--log"
)
"""The event log a command reads or writes (the source and `olstream log simulate`)."""


def parse_base_time(text: str) -> datetime:
    """An ISO 8601 time with its UTC offset."""
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError("needs a UTC offset, e.g. 2024-05-01T00:00:00+00:00")
    return value


SIMULATE_SETTINGS = (
    replace(LOG_URL, required=True),
    Setting(
        "runs", None, "number of workflow runs to write", parse=int, env="", check=at_least(0), required=True
    ),
    Setting(
        "partitions",
        None,
        "partitions of a log this creates (an existing log's must match) [8]",
        parse=int,
        env="",
        check=at_least(1),
    ),
    Setting("seed", 0, "the seed: same seed, same records", parse=int, env=""),
    Setting(
        "base_time",
        BASE_TIME,
        "simulated start time, ISO 8601 with offset",
        parse=parse_base_time,
        env="",
    ),
    Setting("batch_size", 5000, "records per append transaction", parse=int, env="", check=at_least(1)),
    LOG_FORMAT,
    LOG_LEVEL,
)


@dataclass(frozen=True, slots=True)
class SimulateSettings:
    log_url: str
    runs: int
    partitions: int | None
    seed: int
    base_time: datetime
    batch_size: int
    log_format: str
    log_level: str


def resolve_simulate_settings(
    flags: Mapping[str, Any], environ: Mapping[str, str]
) -> tuple[SimulateSettings, Resolved]:
    r = resolve("simulate", SIMULATE_SETTINGS, flags, environ)
    if not r["log_url"]:
        raise ConfigError("no event log: pass --log URL or set OLSTREAM_LOG_URL")
    if r["runs"] is None:
        raise ConfigError("how many runs: pass --runs N")
    settings = SimulateSettings(**{k: r[k] for k in SimulateSettings.__dataclass_fields__})
    return settings, r
