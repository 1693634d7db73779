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
    """The exit codes of every `olstream` command; `EXIT_MEANINGS` says what each means."""

    OK = 0
    FAILED = 1
    CONFIG = 2
    NOT_RUNNING = 3
    SEND_FAILED = 75
    INTERRUPTED = 130


EXIT_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "done: `--until-idle` reached its end, a signal stopped the command after a flush, "
    "`--print-config`, or a check passed",
    ExitCode.FAILED: "failed while running: Kafka refused a record, the event log or a receiver failed; "
    "`log simulate` could not open its log; a local service (kafka, postgres, marquez) could not be "
    "started, stopped or asked; the demo failed",
    ExitCode.CONFIG: "cannot start as configured, and nothing was done: an invalid setting or flag (stderr "
    "names it); the source's event log that cannot be opened; Kafka unreachable when the source or the "
    "worker starts; a faust without a private name the worker needs",
    ExitCode.NOT_RUNNING: "`olstream kafka status`, `olstream postgres status`: the local service is not "
    "running",
    ExitCode.SEND_FAILED: "the worker could not send a batch's events (EX_TEMPFAIL): it left at once, "
    "without a commit, and a restart processes the batch again",
    ExitCode.INTERRUPTED: "a second SIGINT/SIGTERM stopped the command before its flush finished",
}
"""The one table of exit codes (docs/operations.md#exit-codes is generated from it)."""
