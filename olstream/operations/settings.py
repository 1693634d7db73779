"""Settings of the commands that operate a running pipeline: `status`, `errors`, `explain`.

Declared once, resolved by the shared resolver like every service's: flags > environment > the
--config file (sections `status:`, `errors:`, `explain:`) > defaults. These commands read the
pipeline's Kafka topics (and, for some, its event log); they import no local launcher.
(`olstream replay`'s settings are in `replay_settings.py`.)
"""

from __future__ import annotations

from collections.abc import Callable

from olstream.contract import topics
from olstream.eventlog.settings import LOG_URL
from olstream.shared.config import BOOTSTRAP, Old, Setting, at_least, positive
from olstream.shared.kafka_settings import KAFKA_CLIENT_SETTINGS
from olstream.shared.pipeline_names import APP_ID, EVENTS_TOPIC_ENV, RECORDS_TOPIC_ENV, SINK_DLQ_TOPIC_ENV
from olstream.shared.schema_registry import SCHEMA_REGISTRY_SETTINGS

STATUS = (
    BOOTSTRAP,
    *KAFKA_CLIENT_SETTINGS,
    Setting(
        "wait",
        10.0,
        "seconds to wait for the broker",
        parse=float,
        env="",
        check=positive,
        old=Old(flag="--timeout", key="timeout"),
    ),
)
"""`olstream status` and `olstream errors list|show`: the broker, and how long to wait for it."""

ERRORS_REDRIVE = (*STATUS, LOG_URL)
"""`olstream errors redrive`: the broker, and the event log its source error rows are re-read from."""


def _names(what: str) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(",") if n.strip())
        if not names:
            raise ValueError(f"expected {what} separated by commas")
        return names

    return parse


_group_list = _names("consumer group names")

ERRORS_LIST = (
    *STATUS,
    Setting(
        "topics",
        None,
        "the error topics `errors list` reads when no --topic is given, comma-separated (the chart "
        "writes its release's here) [the default error topics of the source, the worker and the sink]",
        parse=_names("topic names"),
        env="",
        flag="",
    ),
)
"""`olstream errors list`: the broker, and the pipeline's error topics (the file's `errors:` section)."""


EXPLAIN = (
    *STATUS,
    Setting(
        "records_topic",
        topics.EVENTLOG,
        "records topic (the source's output, the worker's input)",
        env=RECORDS_TOPIC_ENV,
    ),
    Setting(
        "events_topic",
        topics.RUN_EVENTS,
        "events topic (the worker's output, the sinks' input)",
        env=EVENTS_TOPIC_ENV,
    ),
    Setting(
        "dlq_topic",
        (topics.SINK_DLQ,),
        "the sinks' dead-letter topics, comma-separated (one per receiver: the chart writes its "
        "release's into the file's `explain:` section)",
        parse=_names("topic names"),
        env=SINK_DLQ_TOPIC_ENV,
    ),
    APP_ID,
    Setting(
        "sink_groups",
        None,
        "sink consumer groups, comma-separated [every group with a commit on the events topic]",
        parse=_group_list,
        env="",
    ),
    Setting(
        "max_runs",
        10,
        "runs shown at most (a workflow instance has many; the latest)",
        parse=int,
        env="",
        check=at_least(1),
    ),
    Setting(
        "time_slack",
        600.0,
        "seconds between hosts' clocks allowed for: topics are read from a run's start (or first record) "
        "less this",
        parse=float,
        env="",
        check=at_least(0),
    ),
    Setting(
        "scan_threads",
        4,
        "consumers reading a topic's partitions in parallel",
        parse=int,
        env="",
        check=at_least(1),
    ),
    *SCHEMA_REGISTRY_SETTINGS,  # resolves the schema ids of `confluent`-framed records
    LOG_URL,
)
"""`olstream explain`: the broker, the pipeline's topics and groups, and (optionally) the event log."""
