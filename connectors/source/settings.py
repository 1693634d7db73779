"""The source connector's settings: declared once (`SOURCE_SETTINGS`), resolved by the shared resolver."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from olstream.connectors.source.tailer import TailerSettings
from olstream.contract import topics
from olstream.contract.framing import CONFLUENT, SINGLE_OBJECT, WIRE_FORMATS
from olstream.eventlog.settings import LOG_URL
from olstream.shared import deadletter
from olstream.shared.config import (
    BOOTSTRAP,
    LOG_FORMAT,
    LOG_LEVEL,
    METRICS_HOST,
    METRICS_PORT,
    Old,
    Resolved,
    Setting,
    at_least,
    defaults,
    field_default,
    resolve,
)
from olstream.shared.errors import ConfigError
from olstream.shared.kafka_clients import KafkaConnection
from olstream.shared.kafka_settings import (
    KAFKA_CLIENT_SETTINGS,
    TOPIC_SETTINGS,
    Replication,
    connection_settings,
    replication_of,
)
from olstream.shared.pipeline_names import RECORDS_TOPIC_ENV
from olstream.shared.schema_registry import (
    COMPATIBILITY_LEVELS,
    SCHEMA_REGISTRY_SETTINGS,
    RegistryConnection,
    registry_connection_of,
)
from olstream.shared.stopping import STOP_TIMEOUT


def _compatibility_level(v: str) -> str | None:
    return None if v in COMPATIBILITY_LEVELS else f"must be one of {', '.join(COMPATIBILITY_LEVELS)}"


SOURCE_SETTINGS = (
    replace(LOG_URL, required=True),
    BOOTSTRAP,
    *KAFKA_CLIENT_SETTINGS,
    *TOPIC_SETTINGS,
    Setting(
        "topic", topics.EVENTLOG, "records topic", env=RECORDS_TOPIC_ENV, old=Old(env="OLSTREAM_SOURCE_TOPIC")
    ),
    Setting(
        "errors_topic",
        None,
        "topic for rows that do not decode [<topic>.errors]",
        env="OLSTREAM_SOURCE_ERRORS_TOPIC",
    ),
    Setting(
        "partitions",
        None,
        "partitions of a records topic it creates (and its errors topic) [as many as the log has]",
        parse=int,
        env="OLSTREAM_SOURCE_PARTITIONS",
        check=at_least(1),
    ),
    Setting("until_idle", False, "exit 0 once caught up and quiet for --idle-seconds", switch=True, env=""),
    Setting("idle_seconds", 2.0, "quiet period for --until-idle, s", parse=float, env="", check=at_least(0)),
    Setting(
        "exactly_once",
        False,
        "transactional producer: each record once for read_committed consumers",
        switch=True,
        env="OLSTREAM_SOURCE_EXACTLY_ONCE",
    ),
    Setting(
        "wait",
        15.0,
        "seconds to wait for the broker at start",
        parse=float,
        env="",
        check=at_least(0),
        old=Old(flag="--connect-timeout", key="connect_timeout"),
    ),
    Setting(
        "batch_size",
        field_default(TailerSettings, "batch_size"),
        "rows read per partition per round",
        parse=int,
        env="OLSTREAM_SOURCE_BATCH_SIZE",
        check=at_least(1),
    ),
    Setting(
        "max_wait",
        field_default(TailerSettings, "max_wait"),
        "longest pause between polls of an idle log, s",
        parse=float,
        env="",
        check=at_least(0),
    ),
    Setting(
        "gap_grace",
        field_default(TailerSettings, "gap_grace"),
        "how long a missing offset may stay missing, s",
        parse=float,
        env="",
        check=at_least(0),
    ),
    Setting(
        "transaction_interval",
        0.1,
        "--exactly-once: commit a transaction every N s",
        parse=float,
        env="",
        check=at_least(0),
    ),
    Setting(
        "check",
        "full",
        "full: decode every body under its writer schema; header: magic, fingerprint, position",
        choices=("full", "header"),
        env="OLSTREAM_SOURCE_CHECK",
    ),
    Setting(
        "max_record_bytes",
        topics.MAX_MESSAGE_BYTES,
        "largest row published; a larger one goes to the errors topic as too_large (topics it "
        "creates accept this much; keep it within what the worker's consumers fetch)",
        parse=int,
        env="OLSTREAM_SOURCE_MAX_RECORD_BYTES",
        check=at_least(deadletter.COPY_LIMIT),
    ),
    *SCHEMA_REGISTRY_SETTINGS,
    Setting(
        "wire_format",
        SINGLE_OBJECT,
        "records-topic values: single-object (the stored bytes: C3 01 + fingerprint) or confluent "
        "(00 + the registry's schema id; needs --schema-registry)",
        choices=WIRE_FORMATS,
        env="OLSTREAM_SOURCE_WIRE_FORMAT",
        old=Old(env="OLSTREAM_WIRE_FORMAT"),
    ),
    Setting(
        "schema_compatibility",
        "BACKWARD",
        "with --schema-registry: the compatibility rule set on each subject of the records topic",
        parse=str.upper,
        check=_compatibility_level,
        env="OLSTREAM_SOURCE_SCHEMA_COMPATIBILITY",
        old=Old(env="OLSTREAM_SCHEMA_COMPATIBILITY"),
    ),
    STOP_TIMEOUT,
    METRICS_PORT,
    METRICS_HOST,
    LOG_FORMAT,
    LOG_LEVEL,
)
_D = defaults(SOURCE_SETTINGS)


@dataclass(frozen=True, slots=True)
class SourceSettings:
    log_url: str
    bootstrap: str = _D["bootstrap"]
    topic: str = _D["topic"]
    errors_topic: str = topics.errors_topic_of(_D["topic"])
    partitions: int | None = _D["partitions"]  # None: as many as the log has
    until_idle: bool = _D["until_idle"]
    idle_seconds: float = _D["idle_seconds"]
    exactly_once: bool = _D["exactly_once"]
    connect_timeout: float = _D["wait"]
    transaction_interval: float = _D["transaction_interval"]
    check_bodies: bool = _D["check"] == "full"
    max_record_bytes: int = _D["max_record_bytes"]
    tailer: TailerSettings = field(default_factory=TailerSettings)
    stop_timeout: float = _D["stop_timeout"]
    metrics_port: int = _D["metrics_port"]
    metrics_host: str = _D["metrics_host"]
    log_format: str = _D["log_format"]
    log_level: str = _D["log_level"]
    kafka: KafkaConnection | None = None  # None: PLAINTEXT to `bootstrap`
    replication: Replication = field(default_factory=Replication)
    schema_registry: RegistryConnection | None = None  # None: no registry
    wire_format: str = _D["wire_format"]
    schema_compatibility: str = _D["schema_compatibility"]

    @property
    def connection(self) -> KafkaConnection:
        return self.kafka or KafkaConnection(self.bootstrap)

    @property
    def offsets_topic(self) -> str:
        """The compacted topic of checkpoints (a lower bound of the position per log partition)."""
        return topics.offsets_topic_of(self.topic)

    @property
    def transactional_id(self) -> str:
        """Stable per (topic, log): a restarted connector fences its own zombie, and only it."""
        parts = urlsplit(self.log_url)
        where = f"{parts.scheme}://{parts.hostname or ''}:{parts.port or ''}{parts.path}"
        digest = hashlib.sha256(f"{self.topic}|{where}".encode()).hexdigest()[:16]
        return f"olstream-source-{self.topic}-{digest}"


def resolve_source_settings(
    flags: Mapping[str, Any], environ: Mapping[str, str]
) -> tuple[SourceSettings, Resolved]:
    """The command's one settings value, from flags, then the environment, then the file, then defaults."""
    r = resolve("source", SOURCE_SETTINGS, flags, environ)
    if not r["log_url"]:
        raise ConfigError("no event log: pass --log URL or set OLSTREAM_LOG_URL")
    if not r["errors_topic"]:
        r = r.with_value("errors_topic", topics.errors_topic_of(r["topic"]), "default (<topic>.errors)")
    kafka, r = connection_settings(r)
    registry = registry_connection_of(r)
    if r["wire_format"] == CONFLUENT and registry is None:
        raise ConfigError("--wire-format confluent needs --schema-registry URL (the ids are the registry's)")
    settings = SourceSettings(
        log_url=r["log_url"],
        bootstrap=r["bootstrap"],
        topic=r["topic"],
        errors_topic=r["errors_topic"],
        partitions=r["partitions"],
        until_idle=r["until_idle"],
        idle_seconds=r["idle_seconds"],
        exactly_once=r["exactly_once"],
        connect_timeout=r["wait"],
        transaction_interval=r["transaction_interval"],
        check_bodies=r["check"] == "full",
        max_record_bytes=r["max_record_bytes"],
        tailer=TailerSettings(batch_size=r["batch_size"], max_wait=r["max_wait"], gap_grace=r["gap_grace"]),
        stop_timeout=r["stop_timeout"],
        metrics_port=r["metrics_port"],
        metrics_host=r["metrics_host"],
        log_format=r["log_format"],
        log_level=r["log_level"],
        kafka=kafka,
        replication=replication_of(r),
        schema_registry=registry,
        wire_format=r["wire_format"],
        schema_compatibility=r["schema_compatibility"],
    )
    return settings, r
