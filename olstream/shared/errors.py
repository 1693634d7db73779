"""One error base for olstream, with a few meaningful subclasses."""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


class OlstreamError(Exception):
    """Base of every error olstream raises on purpose."""


class ConfigError(OlstreamError):
    """A setting is missing or invalid."""


class MissingExtraError(ConfigError):
    """A command needs a Python package of an optional extra (`olstream[local]`) that is not installed."""


class PlacementError(ConfigError):
    """The records topic's placement (its record in the offsets topic, or the topic it names) does not
    fit: the message names the record or topic and the field."""


class DecodeError(OlstreamError):
    """A record's bytes do not decode; names the record's log partition and offset.

    `reason` is the message text; `error_reason` the code the worker's errors topic carries.
    """

    error_reason: ClassVar[str] = "undecodable"

    def __init__(self, reason: str, partition: int | None = None, offset: int | None = None) -> None:
        self.reason = reason
        self.partition = partition
        self.offset = offset
        where = f"partition {partition}, offset {offset}" if partition is not None else "unknown position"
        super().__init__(f"cannot decode record at {where}: {reason}")


class InvalidTimeError(DecodeError):
    """A record decodes, but one of its times is outside what a record can carry (`contract.times`).

    `field` names it, dotted inside a reference: ``start_time``, ``parent.start_time``.
    """

    error_reason: ClassVar[str] = "invalid_time"

    def __init__(self, reason: str, partition: int | None, offset: int | None, field: str) -> None:
        self.field = field
        super().__init__(reason, partition, offset)


class InfrastructureError(OlstreamError):
    """A local service (Kafka, PostgreSQL, Marquez) could not be started, reached or stopped."""


class KafkaAuthError(InfrastructureError):
    """Kafka refused this client's login (user, password, SASL mechanism) or its TLS handshake
    (an untrusted CA, a certificate without the broker's host name): exit `KAFKA_REFUSED`."""


class DeliveryError(OlstreamError):
    """An event could not be delivered to its receiver."""


class ExitCode(IntEnum):
    """The exit codes of every `olstream` command; `EXIT_MEANINGS` says what each means."""

    OK = 0
    FAILED = 1
    CONFIG = 2
    NOT_RUNNING = 3
    SEND_FAILED = 75
    INPUT_GREW = 76
    KAFKA_REFUSED = 77
    FENCED = 78
    SCHEMA_REGISTRY = 79
    STOP_TIMEOUT = 124
    INTERRUPTED = 130


EXIT_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "done: `--until-idle` reached its end, a signal stopped the command after a flush, "
    "`--print-config`, or a check passed",
    ExitCode.FAILED: "failed while running: Kafka refused a record, the event log or a receiver failed; "
    "`log simulate` could not open its log; a local service (kafka, postgres, mirror, marquez, registry) "
    "could not be started, stopped or asked; the demo failed",
    ExitCode.CONFIG: "cannot start as configured, and nothing was done: an invalid setting or flag (stderr "
    "names it); the source's event log that cannot be opened; Kafka unreachable when the source or the "
    "worker starts; a faust without a private name the worker needs; a Python package of an extra not "
    "installed (stderr names the extra: `pip install 'olstream[local]'`)",
    ExitCode.NOT_RUNNING: "`status` of a local launcher (`olstream kafka status`, `postgres status`, "
    "`mirror status`, `marquez status`, `registry status`): the local service is not running",
    ExitCode.SEND_FAILED: "the worker could not send a batch's events (EX_TEMPFAIL): it left at once, "
    "without a commit, and a restart processes the batch again",
    ExitCode.INPUT_GREW: "the worker's input topic gained partitions while it ran (MirrorMaker 2 "
    "growing a copy, an operator adding partitions): it left before processing a record of them, "
    "with nothing more committed; restart it, and its start grows the state changelog to match",
    ExitCode.KAFKA_REFUSED: "Kafka refused the connection of a service (source, worker, sink, status) "
    "at start, and nothing was done: a wrong SASL user name, password or mechanism, or a TLS "
    "handshake that failed (a CA that did not sign the broker's certificate, a certificate without "
    "the broker's host name); stderr says which, in one line (EX_NOPERM)",
    ExitCode.FENCED: "the worker (under exactly_once) found another worker had initialised the "
    "transactional id of one of its input partitions (the group had dropped it: a pause longer than "
    "the session timeout), dropped its batch, and no rebalance gave it partitions again within 120 s; "
    "nothing it sent after the fence is visible to a read_committed reader; restart it",
    ExitCode.SCHEMA_REGISTRY: "the worker read a `confluent`-framed record whose schema id its "
    "`--schema-registry` does not hold (another registry's id), or could not reach the registry to "
    "resolve one: it left at once, with nothing past the last checkpoint committed and no error record; "
    "restart it with the registry the source registered with (or one that keeps its ids)",
    ExitCode.STOP_TIMEOUT: "a service was still running `--stop-timeout` seconds (default 30) after the "
    "first SIGTERM/SIGINT (a stuck agent, a flush or shutdown that does not end): it left at once, as "
    "`kill -9` would, with nothing more committed; a restart processes the uncommitted input again",
    ExitCode.INTERRUPTED: "a second SIGINT/SIGTERM stopped the command before its flush finished",
}
"""The one table of exit codes (docs/operations.md#exit-codes is generated from it)."""
