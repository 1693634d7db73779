"""The source connector's settings value."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from olstream.connectors.source.tailer import TailerSettings

DEFAULT_TOPIC = "olstream.eventlog"


@dataclass(frozen=True, slots=True)
class SourceSettings:
    log_url: str
    bootstrap: str = "127.0.0.1:9092"
    topic: str = DEFAULT_TOPIC
    errors_topic: str = DEFAULT_TOPIC + ".errors"
    partitions: int = 6
    until_idle: bool = False
    idle_seconds: float = 2.0
    exactly_once: bool = False
    connect_timeout: float = 15.0
    transaction_interval: float = 0.1
    check_bodies: bool = True
    tailer: TailerSettings = field(default_factory=TailerSettings)
    metrics_port: int = 0
    log_format: str = "text"
    log_level: str = "INFO"

    @property
    def offsets_topic(self) -> str:
        """The compacted topic of checkpoints (a lower bound of the position per log partition)."""
        return f"{self.topic}.offsets"

    @property
    def transactional_id(self) -> str:
        """Stable per (topic, log): a restarted connector fences its own zombie, and only it."""
        parts = urlsplit(self.log_url)
        where = f"{parts.scheme}://{parts.hostname or ''}:{parts.port or ''}{parts.path}"
        digest = hashlib.sha256(f"{self.topic}|{where}".encode()).hexdigest()[:16]
        return f"olstream-source-{self.topic}-{digest}"
