"""One error base for olstream, with a few meaningful subclasses."""

from __future__ import annotations


class OlstreamError(Exception):
    """Base of every error olstream raises on purpose."""


class ConfigError(OlstreamError):
    """A setting is missing or invalid."""


class DecodeError(OlstreamError):
    """A record's bytes do not decode; names the record's log partition and offset."""

    def __init__(self, reason: str, partition: int | None = None, offset: int | None = None) -> None:
        self.reason = reason
        self.partition = partition
        self.offset = offset
        where = f"partition {partition}, offset {offset}" if partition is not None else "unknown position"
        super().__init__(f"cannot decode record at {where}: {reason}")


class InfrastructureError(OlstreamError):
    """A local service (Kafka, PostgreSQL, Marquez) could not be started, reached or stopped."""


class DeliveryError(OlstreamError):
    """An event could not be delivered to its receiver."""
