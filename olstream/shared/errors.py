"""One error base for olstream, with a few meaningful subclasses."""

from __future__ import annotations

from enum import IntEnum


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


class ExitCode(IntEnum):
    """The exit codes of every `olstream` command: this table is the only place they are defined."""

    OK = 0
    """Done: `--until-idle` reached its end, a signal stopped the command after a flush, or a check passed."""
    FAILED = 1
    """Failed while running: Kafka refused a record, the event log or a receiver failed."""
    CONFIG = 2
    """Cannot start as configured: an invalid setting or flag, an event log that cannot be opened, Kafka
    unreachable at start. Nothing was done; fix the setting named on stderr."""
    NOT_RUNNING = 3
    """`olstream kafka|postgres status`: the local service is not running."""
    SEND_FAILED = 75
    """The worker could not send a batch's events (EX_TEMPFAIL): it leaves at once, without a commit,
    so a restart processes the batch again."""
    INTERRUPTED = 130
    """Stopped by a second SIGINT/SIGTERM before the flush finished."""
