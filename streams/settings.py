"""The worker's settings: declared once (`WORKER_SETTINGS`), resolved by the shared resolver."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from olstream.contract import topics
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
    positive,
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
from olstream.shared.pipeline_names import (
    APP_ID,
    EVENTS_TOPIC_ENV,
    RECORDS_TOPIC_ENV,
    WORKER_ERRORS_TOPIC_ENV,
)
from olstream.shared.schema_registry import (
    SCHEMA_REGISTRY_SETTINGS,
    RegistryConnection,
    registry_connection_of,
)
from olstream.shared.stopping import STOP_TIMEOUT
from olstream.streams.mapping import JOB_NAMES, MappingConfig
from olstream.streams.retention import DEFAULT_RETENTION_MS
from olstream.streams.run_directory import DEFAULT_PARENT_RETENTION_MS


def _own(key: str, default: Any, what: str, old: str = "", **kwargs: Any) -> Setting:
    """A setting of the worker alone: `OLSTREAM_WORKER_<KEY>`, also read as its name before this
    release (`old`, else `OLSTREAM_<KEY>`) for one more, with a warning."""
    env = f"OLSTREAM_WORKER_{key.upper()}"
    return Setting(key, default, what, env=env, old=Old(env=old or f"OLSTREAM_{key.upper()}"), **kwargs)


def _mapping(name: str) -> Any:
    return field_default(MappingConfig, name)


ON_OFF = ("on", "off")
EXACTLY_ONCE, AT_LEAST_ONCE = "exactly_once", "at_least_once"
PROCESSING_GUARANTEES = (EXACTLY_ONCE, AT_LEAST_ONCE)
RUNNING_EVENTS_DEFAULT = "on" if _mapping("running_events") else "off"  # why: docs/worker.md#running-events


WORKER_SETTINGS = (
    BOOTSTRAP,
    *KAFKA_CLIENT_SETTINGS,
    *TOPIC_SETTINGS,
    APP_ID,
    Setting(
        "client_id",
        None,
        "Kafka client id of this replica (shown as the owner of its partitions by `olstream status`) "
        "[olstream-worker-<host>-<pid>]",
        env="OLSTREAM_WORKER_CLIENT_ID",
    ),
    _own("data_dir", "./olstream-data", "RocksDB table directory"),
    Setting(
        "input_topic",
        topics.EVENTLOG,
        "records topic to read",
        env=RECORDS_TOPIC_ENV,
        old=Old(env="OLSTREAM_INPUT_TOPIC"),
    ),
    Setting(
        "output_topic",
        topics.RUN_EVENTS,
        "topic of the RunEvents (JSON)",
        env=EVENTS_TOPIC_ENV,
        old=Old(env="OLSTREAM_OUTPUT_TOPIC"),
    ),
    Setting(
        "errors_topic",
        topics.STREAM_ERRORS,
        "topic of records that cannot be mapped",
        env=WORKER_ERRORS_TOPIC_ENV,
        old=Old(env="OLSTREAM_ERRORS_TOPIC"),
    ),
    _own(
        "partitions",
        topics.PARTITIONS,
        "partitions of an input topic it creates",
        parse=int,
        check=at_least(1),
    ),
    _own(
        "output_partitions",
        topics.PARTITIONS,
        "partitions of an output topic it creates (not the input's: regions whose input topics have "
        "other partition counts route events alike)",
        parse=int,
        check=at_least(1),
    ),
    Setting("until_idle", False, "exit 0 once the input is consumed to its end", switch=True, env=""),
    _own(
        "retention",
        DEFAULT_RETENTION_MS / 1000,
        "seconds of record time finished runs are kept",
        old="OLSTREAM_RETENTION_SECONDS",
        parse=float,
        check=at_least(0),
    ),
    _own(
        "parent_retention",
        DEFAULT_PARENT_RETENTION_MS / 1000,
        "seconds of record time a run stays a parent its children find in the run directory (a parent "
        "appended longer before its child gets no edge, counted as too_old)",
        old="OLSTREAM_PARENT_RETENTION_SECONDS",
        parse=float,
        check=at_least(0),
    ),
    _own("job_prefix", _mapping("job_prefix"), "prefix before every job name (once, at the front)"),
    _own(
        "job_names",
        _mapping("job_names"),
        "hierarchical: a child's job is its parent's job name + '.' + its own; "
        "flat: {workflowType}@{version} alone",
        choices=JOB_NAMES,
    ),
    _own(
        "running_events",
        RUNNING_EVENTS_DEFAULT,
        "on: a RUNNING event for each declaration that adds a dataset to an open run (the new dataset "
        "only), so open runs show their datasets; off: START and the terminal event only",
        choices=ON_OFF,
    ),
    _own("producer", _mapping("producer"), "the RunEvents' producer URL"),
    _own("integration", _mapping("integration"), "jobType facet integration"),
    _own("programming_language", _mapping("programming_language"), "errorMessage facet language"),
    _own(
        "processing_guarantee",
        "exactly_once",
        "exactly_once: each checkpoint is one Kafka transaction of the worker's one producer (its "
        "events, error records, state and input offsets), fenced by the group's generation, so a worker "
        "the group dropped can never write again and read_committed subscribers get each event once; "
        "at_least_once: no transactions (for Kafka-compatible services without them), events may "
        "repeat after a crash or a rebalance",
        choices=PROCESSING_GUARANTEES,
    ),
    _own("batch_size", 5000, "records per processing batch", parse=int, check=at_least(1)),
    _own("batch_seconds", 0.25, "max age of a batch before it is flushed, s", parse=float, check=at_least(0)),
    _own("session_timeout", 10.0, "consumer group session timeout, s", parse=float, check=positive),
    _own(
        "standby_states",
        "off",
        "on: keep a warm copy of the run states of every input partition another replica owns (each "
        "replica reads every changelog write and holds the whole table on disk), so a partition moved "
        "here restores only the changelog's tail; off: a partition new to this replica restores its "
        "whole changelog partition (docs/worker.md#scaling-and-failure)",
        choices=ON_OFF,
    ),
    _own(
        "metadata_refresh",
        30.0,
        "seconds between reads of the cluster's metadata (how soon an input that gained partitions "
        "is noticed)",
        parse=float,
        check=positive,
    ),
    _own(
        "max_event_bytes",
        topics.MAX_MESSAGE_BYTES,
        "largest RunEvent (and run state) written; a record that would make a larger one goes to the "
        "errors topic as too_large (topics it creates accept this much)",
        parse=int,
        check=at_least(deadletter.COPY_LIMIT),
    ),
    *SCHEMA_REGISTRY_SETTINGS,  # resolves the schema ids of `confluent`-framed records
    STOP_TIMEOUT,
    METRICS_PORT,
    METRICS_HOST,
    LOG_FORMAT,
    LOG_LEVEL,
)
_D = defaults(WORKER_SETTINGS)


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    bootstrap: str = _D["bootstrap"]
    app_id: str = _D["app_id"]
    client_id: str | None = _D["client_id"]  # None: olstream-worker-<host>-<pid>
    data_dir: str = _D["data_dir"]
    input_topic: str = _D["input_topic"]
    output_topic: str = _D["output_topic"]
    errors_topic: str = _D["errors_topic"]
    default_partitions: int = _D["partitions"]
    output_partitions: int = _D["output_partitions"]
    until_idle: bool = _D["until_idle"]
    processing_guarantee: str = _D["processing_guarantee"]
    idle_check_interval: float = 0.5
    batch_size: int = _D["batch_size"]
    batch_within: float = _D["batch_seconds"]
    state_cache_size: int = 5_000  # decoded run states (LRU); a run's records come close together
    retention_ms: int = DEFAULT_RETENTION_MS
    parent_retention_ms: int = DEFAULT_PARENT_RETENTION_MS
    metrics_port: int = _D["metrics_port"]
    metrics_host: str = _D["metrics_host"]
    session_timeout: float = _D["session_timeout"]
    standby_states: bool = _D["standby_states"] == "on"
    metadata_refresh: float = _D["metadata_refresh"]
    max_event_bytes: int = _D["max_event_bytes"]
    stop_timeout: float = _D["stop_timeout"]
    mapping: MappingConfig = field(default_factory=MappingConfig)
    log_format: str = _D["log_format"]
    log_level: str = _D["log_level"]
    kafka: KafkaConnection | None = None  # None: PLAINTEXT to `bootstrap`
    replication: Replication = field(default_factory=Replication)
    schema_registry: RegistryConnection | None = None  # None: a confluent-framed record exits CONFIG

    @property
    def connection(self) -> KafkaConnection:
        return self.kafka or KafkaConnection(self.bootstrap)

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee == EXACTLY_ONCE


def resolve_worker_settings(
    flags: Mapping[str, Any], environ: Mapping[str, str]
) -> tuple[WorkerSettings, Resolved]:
    """The command's one settings value, from flags, then the environment, then the file, then defaults."""
    r = resolve("worker", WORKER_SETTINGS, flags, environ)
    try:
        mapping = MappingConfig(
            producer=r["producer"],
            job_prefix=r["job_prefix"],
            job_names=r["job_names"],
            integration=r["integration"],
            programming_language=r["programming_language"],
            running_events=r["running_events"] == "on",
        )
    except ValueError as e:
        raise ConfigError(f"invalid worker setting: {e}") from e
    kafka, r = connection_settings(r)
    settings = WorkerSettings(
        bootstrap=r["bootstrap"],
        app_id=r["app_id"],
        client_id=r["client_id"],
        data_dir=r["data_dir"],
        input_topic=r["input_topic"],
        output_topic=r["output_topic"],
        errors_topic=r["errors_topic"],
        default_partitions=r["partitions"],
        output_partitions=r["output_partitions"],
        until_idle=r["until_idle"],
        processing_guarantee=r["processing_guarantee"],
        retention_ms=int(r["retention"] * 1000),
        parent_retention_ms=int(r["parent_retention"] * 1000),
        batch_size=r["batch_size"],
        metrics_port=r["metrics_port"],
        metrics_host=r["metrics_host"],
        batch_within=r["batch_seconds"],
        session_timeout=r["session_timeout"],
        standby_states=r["standby_states"] == "on",
        metadata_refresh=r["metadata_refresh"],
        max_event_bytes=r["max_event_bytes"],
        stop_timeout=r["stop_timeout"],
        mapping=mapping,
        log_format=r["log_format"],
        log_level=r["log_level"],
        kafka=kafka,
        replication=replication_of(r),
        schema_registry=registry_connection_of(r),
    )
    return settings, r
