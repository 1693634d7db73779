"""`olstream replay`'s own settings (`REPLAY_SETTINGS`, section `replay:` of the file), the times of
its range (an ISO time or a duration back from now) and the name of its consumer group.

Where and how it delivers is the sink's: its destination (OPENLINEAGE_*, openlineage.yml, the
destination flags) and its delivery settings, resolved as `olstream sink` resolves them
(`connectors.sink.settings.build_settings`), section `sink:` of the file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from olstream.connectors.sink.bounds import TimeRange, format_ms
from olstream.connectors.sink.settings import SINK_SETTINGS, SinkSettings
from olstream.shared.config import Setting, at_least, resolve
from olstream.shared.errors import ConfigError
from olstream.shared.moments import parse_moment

REPLAY_SETTINGS = (
    Setting(
        "since",
        None,
        "start of the range, inclusive: an ISO time (UTC unless it has an offset) or a duration back "
        "from the first run (2h, 30m, 1d12h); message timestamps (produce time), not eventTime",
        env="OLSTREAM_REPLAY_SINCE",
    ),
    Setting(
        "until",
        None,
        "end of the range, exclusive, as --since [the topic's end when the first run started]",
        env="OLSTREAM_REPLAY_UNTIL",
    ),
    Setting("job", None, "only events of the job with this name", env="OLSTREAM_REPLAY_JOB"),
    Setting("namespace", None, "only events of jobs in this namespace", env="OLSTREAM_REPLAY_NAMESPACE"),
    Setting(
        "group",
        None,
        "the replay's consumer group, never the live sink's [olstream-replay.TOPIC.HASH of destination, "
        "range and filters]",
        env="OLSTREAM_REPLAY_GROUP",
    ),
    Setting(
        "rate",
        0.0,
        "events per second at most (0: no limit)",
        parse=float,
        env="OLSTREAM_REPLAY_RATE",
        check=at_least(0),
    ),
    Setting(
        "restart",
        False,
        "start the range over: resolve it again and ignore where the group stopped",
        switch=True,
        env="OLSTREAM_REPLAY_RESTART",
    ),
    Setting(
        "dry_run",
        False,
        "count what would be sent, by event type; send and commit nothing",
        switch=True,
        env="OLSTREAM_REPLAY_DRY_RUN",
    ),
)
"""The replay's own settings; its destination and delivery are the sink's (`SINK_FLAGS`)."""

NOT_FOR_REPLAY = frozenset({"group", "dry_run", "until_idle", "instance_id", "metrics_port", "metrics_host"})
SINK_FLAGS = tuple(s for s in SINK_SETTINGS if s.key not in NOT_FOR_REPLAY)
"""The sink's settings a replay takes as flags: the replay has its own group and dry run, always
ends at its range's end, joins as a dynamic member and serves no metrics."""

REPLAY_KEYS = frozenset(s.key for s in REPLAY_SETTINGS)
GROUP_PREFIX = "olstream-replay"


@dataclass(frozen=True)
class ReplaySettings:
    sink: SinkSettings  # destination, delivery, topic; `sink.group` is the live sink's group
    since: str | None
    until: str | None
    times: TimeRange  # since and until resolved at this run's start
    job: str | None
    namespace: str | None
    group: str
    rate: float
    restart: bool
    dry_run: bool
    sources: tuple[tuple[str, str], ...] = ()

    def describe(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "until": self.until,
            "range": self.times.describe(),
            "job": self.job,
            "namespace": self.namespace,
            "group": self.group,
            "rate": self.rate,
            "restart": self.restart,
            "dry_run": self.dry_run,
            "sources": dict(self.sources),
            "sink": self.sink.describe(),
        }


def group_name(
    sink: SinkSettings, since: str | None, until: str | None, job: str | None, namespace: str | None
) -> str:
    """`olstream-replay.TOPIC.HASH`: one group per topic, destination, range as given, and filters, so
    running the same replay again resumes it, and any other replay starts its own."""
    identity = [sink.topic, sink.destination, sink.transport, since, until, job, namespace]
    digest = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:12]
    return f"{GROUP_PREFIX}.{sink.topic}.{digest}"


def build_replay_settings(
    flags: Mapping[str, Any], sink: SinkSettings, env: Mapping[str, str], now: datetime
) -> ReplaySettings:
    """The replay's settings over the sink's (`sink`, built from the same flags minus the replay's)."""
    r = resolve("replay", REPLAY_SETTINGS, flags, env)
    times = TimeRange(
        parse_moment(r["since"], now, "--since") if r["since"] else None,
        parse_moment(r["until"], now, "--until") if r["until"] else None,
    )
    if times.since_ms is not None and times.until_ms is not None and times.since_ms >= times.until_ms:
        raise ConfigError(
            f"empty range: --since {format_ms(times.since_ms)} is not before "
            f"--until {format_ms(times.until_ms)}"
        )
    group = r["group"] or group_name(sink, r["since"], r["until"], r["job"], r["namespace"])
    if group == sink.group:
        raise ConfigError(
            f"group {group} is the live sink's consumer group "
            f"({dict(sink.sources).get('group', 'default')}): a replay never moves it; "
            "give another --group, or none"
        )
    return ReplaySettings(
        sink=sink,
        since=r["since"],
        until=r["until"],
        times=times,
        job=r["job"],
        namespace=r["namespace"],
        group=group,
        rate=r["rate"],
        restart=r["restart"],
        dry_run=r["dry_run"],
        sources=tuple(sorted(r.origins.items())),
    )


def sink_flags(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The flags the sink's settings are built from: all but the replay's own."""
    return {k: v for k, v in flags.items() if k not in REPLAY_KEYS}
