"""Default topic names and partition counts: each written here once.

The source publishes to `EVENTLOG` (its rows that do not decode to `errors_topic_of(EVENTLOG)`,
its checkpoints to `offsets_topic_of(EVENTLOG)`); the worker reads `EVENTLOG` and writes
`RUN_EVENTS` (bad input to `STREAM_ERRORS`); the sink reads `RUN_EVENTS` and dead-letters to
`SINK_DLQ`. Every name is a setting of the command that uses it (docs/configuration.md).
"""

from __future__ import annotations

EVENTLOG = "olstream.eventlog"
RUN_EVENTS = "openlineage.events"
STREAM_ERRORS = "olstream.stream.errors"
SINK_DLQ = "openlineage.events.dlq"
PARTITIONS = 6
"""Partitions of a topic the worker creates (its input when missing, its output) and the demo's; the
source creates its records topic with as many partitions as the log has. An existing topic keeps its
own."""
MAX_MESSAGE_BYTES = 1_048_576
"""Default of the largest message value olstream publishes: a source row (`--max-record-bytes`),
a worker's event (`--max-event-bytes`). Anything larger goes to the errors topic as `too_large`."""
MESSAGE_HEADROOM_BYTES = 65_536
"""What a topic accepts on top of the largest value: the key, the headers and the batch framing."""


def size_config(max_value_bytes: int) -> dict[str, str]:
    """Topic settings for values up to `max_value_bytes`: a topic olstream creates accepts them."""
    return {"max.message.bytes": str(max_value_bytes + MESSAGE_HEADROOM_BYTES)}


def producer_size_config(max_value_bytes: int) -> dict[str, int]:
    """librdkafka producer settings for values up to `max_value_bytes` (its own default is 1,000,000)."""
    return {"message.max.bytes": max_value_bytes + MESSAGE_HEADROOM_BYTES}


def errors_topic_of(records_topic: str) -> str:
    """The source's topic for rows that do not decode."""
    return f"{records_topic}.errors"


def offsets_topic_of(records_topic: str) -> str:
    """The source's compacted topic of checkpoints (a lower bound of the position per log partition)."""
    return f"{records_topic}.offsets"


PIPELINE = (EVENTLOG, errors_topic_of(EVENTLOG), RUN_EVENTS, STREAM_ERRORS, SINK_DLQ)
"""The topics of a pipeline with default names, source to sink (what `olstream status` shows)."""
