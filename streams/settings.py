"""The worker's settings: one frozen value built once from flags and ``OLSTREAM_*`` env."""

from __future__ import annotations

from dataclasses import dataclass, field

from olstream.streams.mapping import MappingConfig
from olstream.streams.retention import DEFAULT_RETENTION_MS

DEFAULT_INPUT_TOPIC = "olstream.eventlog"
DEFAULT_OUTPUT_TOPIC = "openlineage.events"
DEFAULT_ERRORS_TOPIC = "olstream.stream.errors"


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    bootstrap: str = "127.0.0.1:9092"
    app_id: str = "olstream-stream"
    data_dir: str = "./olstream-data"
    input_topic: str = DEFAULT_INPUT_TOPIC
    output_topic: str = DEFAULT_OUTPUT_TOPIC
    errors_topic: str = DEFAULT_ERRORS_TOPIC
    default_partitions: int = 6
    until_idle: bool = False
    idle_check_interval: float = 0.5
    batch_size: int = 5000
    batch_within: float = 0.25
    state_cache_size: int = 20_000
    retention_ms: int = DEFAULT_RETENTION_MS
    metrics_port: int = 0
    session_timeout: float = 10.0
    mapping: MappingConfig = field(default_factory=MappingConfig)
