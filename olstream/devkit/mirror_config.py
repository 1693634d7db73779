"""Pure parts of the local MirrorMaker 2: settings, Java properties files, the rendered mm2.properties.

`olstream mirror up` runs MirrorMaker 2's dedicated driver for one flow, source -> target, with
`--clusters <target>`: only the herder writing into the target runs, and nothing is written into
the source cluster (`offset-syncs.topic.location=target`, no heartbeats emitted into it).
docs/multi-region.md explains the properties that matter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from olstream.devkit.log4j2 import log4j2_properties
from olstream.devkit.process import cache_home, state_home
from olstream.shared.java_properties import parse_properties as parse_properties
from olstream.shared.java_properties import read_properties as read_properties
from olstream.shared.java_properties import render_properties as render_properties
from olstream.shared.kafka_clients import is_secret_property

DEFAULT_MIRROR_VERSION = "4.3.1"
"""connect-mirror 4.4.0 is not on Maven Central; 4.3.1 runs against the 4.4.0 brokers."""
DEFAULT_TOPICS = r"olstream\.eventlog"
MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"
HEAP_OPTS = ("-Xms128m", "-Xmx512m", "-XX:+UseG1GC")
POLICIES = {
    "default": "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
    "identity": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
}
_ALIAS = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class MirrorSettings:
    """One MirrorMaker 2 replicating the topics matching `topics` from the source to the target."""

    source_bootstrap: str
    target_bootstrap: str
    data_dir: Path
    source_alias: str = "A"
    target_alias: str = "B"
    topics: str = DEFAULT_TOPICS
    replication_factor: int = 1
    refresh_interval: int = 5
    offset_flush_interval_ms: int = 1000
    replication_policy: str = "default"
    version: str = DEFAULT_MIRROR_VERSION
    start_timeout: float = 120.0
    source_config: Path | None = None
    target_config: Path | None = None
    properties: Path | None = None

    def __post_init__(self) -> None:
        for alias in (self.source_alias, self.target_alias):
            if problem := alias_problem(alias):
                raise ValueError(f"cluster alias {alias!r} {problem}")
        if self.source_alias == self.target_alias:
            raise ValueError(f"the source and target aliases are both {self.source_alias!r}")
        if self.replication_policy not in POLICIES:
            raise ValueError(f"replication policy must be one of {', '.join(POLICIES)}")
        if self.replication_policy == "identity" and self.source_bootstrap == self.target_bootstrap:
            raise ValueError("the identity policy into the source cluster itself would loop")

    def remote_topic(self, topic: str) -> str:
        """The name a source topic gets on the target (`A.olstream.eventlog`; identity: the same)."""
        return remote_topic(self.replication_policy, self.source_alias, topic)

    @property
    def config_dir(self) -> Path:
        return self.data_dir / "config"

    @property
    def mm2_properties(self) -> Path:
        return self.config_dir / "mm2.properties"

    @property
    def logging_config(self) -> Path:
        return self.config_dir / "log4j2.properties"

    @property
    def log_dir(self) -> Path:
        """mirror.log (log4j2) and mirror.out (the JVM's stdout and stderr)."""
        return self.data_dir / "logs"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "mirror.log"


def remote_topic(policy: str, source_alias: str, topic: str) -> str:
    return topic if policy == "identity" else f"{source_alias}.{topic}"


def alias_problem(alias: str) -> str | None:
    """Why a cluster alias cannot be used (it names property keys and remote topics), else None."""
    if not _ALIAS.fullmatch(alias):
        return "must be letters, digits, '_' or '-'"
    return None


def regex_problem(pattern: str) -> str | None:
    try:
        re.compile(pattern)
    except re.error as e:
        return f"is not a regular expression: {e}"
    return None


def is_secret_key(key: str) -> bool:
    """One rule for every client property (`olstream.shared.kafka_clients.is_secret_property`)."""
    return is_secret_property(key)


def default_data_dir() -> Path:
    """`$XDG_STATE_HOME/olstream/mirror` (~/.local/state/olstream/mirror)."""
    return state_home() / "olstream" / "mirror"


def jar_cache_dir(version: str) -> Path:
    """Per-version jar cache: `$XDG_CACHE_HOME/olstream/mirror/<version>/libs` (~/.cache/...)."""
    return cache_home() / "olstream" / "mirror" / version / "libs"


# --- mm2.properties ---


def client_properties(alias: str, props: Mapping[str, str], what: str) -> dict[str, str]:
    """A cluster's client settings (security.protocol, sasl.*, ssl.*) as `<alias>.<key>`."""
    out = {}
    for key, value in props.items():
        if key == "bootstrap.servers":
            raise ValueError(f"{what} sets bootstrap.servers: give the cluster's address with its flag")
        out[f"{alias}.{key}"] = value
    return out


def mm2_properties(
    settings: MirrorSettings,
    source_client: Mapping[str, str] | None = None,
    target_client: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """mm2.properties of the one flow source -> target; `extra` (--properties) is written last and wins."""
    s = settings
    src, dst = s.source_alias, s.target_alias
    rf = str(s.replication_factor)
    props = {
        "clusters": f"{src}, {dst}",
        f"{src}.bootstrap.servers": s.source_bootstrap,
        f"{dst}.bootstrap.servers": s.target_bootstrap,
        f"{src}->{dst}.enabled": "true",
        f"{src}->{dst}.topics": s.topics,
        f"{dst}->{src}.enabled": "false",
        "replication.policy.class": POLICIES[s.replication_policy],
        # every topic MirrorMaker 2 creates on the target: the mirrored ones and its own
        "replication.factor": rf,
        "checkpoints.topic.replication.factor": rf,
        "heartbeats.topic.replication.factor": rf,
        "offset-syncs.topic.replication.factor": rf,
        "config.storage.replication.factor": rf,
        "offset.storage.replication.factor": rf,
        "status.storage.replication.factor": rf,
        # the offset syncs live on the target too: MirrorMaker 2 only reads the source
        "offset-syncs.topic.location": "target",
        "refresh.topics.interval.seconds": str(s.refresh_interval),
        "refresh.groups.interval.seconds": str(s.refresh_interval),
        "emit.heartbeats.enabled": "true",
        "emit.checkpoints.enabled": "true",
        # olstream replicates its input; consumer groups are not carried over
        "sync.group.offsets.enabled": "false",
        # a worker setting: only the target's prefixed key reaches the herder (a top-level one does not)
        f"{dst}.offset.flush.interval.ms": str(s.offset_flush_interval_ms),
        # every plugin on the classpath has a ServiceLoader manifest: skip the 3 s reflection scans
        "plugin.discovery": "service_load",
        f"{dst}.plugin.discovery": "service_load",
    }
    props.update(client_properties(src, source_client or {}, "--source-config"))
    props.update(client_properties(dst, target_client or {}, "--target-config"))
    props.update(extra or {})
    return props


def with_files(settings: MirrorSettings) -> dict[str, str]:
    """mm2_properties with the client configs and the --properties file of the settings read in."""
    source = read_properties(settings.source_config, "--source-config") if settings.source_config else {}
    target = read_properties(settings.target_config, "--target-config") if settings.target_config else {}
    extra = read_properties(settings.properties, "--properties") if settings.properties else {}
    return mm2_properties(settings, source, target, extra)


MM2_HEADER = (
    "Written by `olstream mirror up`; rewritten on every start (flags: docs/multi-region.md).",
    "May hold the clients' secrets (--source-config, --target-config): readable by its owner only.",
)


def logging_config(settings: MirrorSettings) -> str:
    """log4j2 config writing a size-capped mirror.log (its INFO lines tell `up` when it is ready)."""
    return log4j2_properties(settings.log_file)


def java_command(java: str, settings: MirrorSettings, classpath: str) -> list[str]:
    """The dedicated MirrorMaker 2 driver, running only the herder that writes into the target."""
    return [
        java,
        *HEAP_OPTS,
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={settings.log_dir}",
        f"-Dlog4j2.configurationFile={settings.logging_config}",
        "-cp",
        classpath,
        MAIN_CLASS,
        str(settings.mm2_properties),
        "--clusters",
        settings.target_alias,
    ]


# --- readiness, from MirrorMaker 2's own log (no client of either cluster needed) ---

_SOURCE_STARTED = re.compile(r"Started MirrorSourceConnector with (\d+) topic-partitions")
_HEARTBEAT_TASK = "{id=MirrorHeartbeatConnector-0} Source task finished initialization and start"
_SOURCE_TASK = "{id=MirrorSourceConnector-0} Source task finished initialization and start"


@dataclass(frozen=True)
class Readiness:
    """What mirror.log has shown since this start.

    Ready: the source connector has listed the matching topics (and created them on the target),
    the heartbeat task writes into the target, and, when any topic matched, the first
    replication task has started (it resumes from MirrorMaker 2's committed positions).
    """

    partitions: int | None = None  # topic-partitions the source connector found at its start
    heartbeats: bool = False
    source_task: bool = False
    problems: tuple[str, ...] = ()  # the last WARN and ERROR lines, for the failure message

    @property
    def ready(self) -> bool:
        return self.partitions is not None and self.heartbeats and (self.partitions == 0 or self.source_task)

    def seen(self, line: str) -> Readiness:
        if match := _SOURCE_STARTED.search(line):
            return replace(self, partitions=int(match.group(1)))
        if _HEARTBEAT_TASK in line:
            return replace(self, heartbeats=True)
        if _SOURCE_TASK in line:
            return replace(self, source_task=True)
        if line.startswith("[") and ("] ERROR " in line or "] WARN " in line):
            return replace(self, problems=(*self.problems[-9:], line))
        return self
