"""The names a pipeline's commands share: one environment variable each, for every command that reads
it (the worker, `status`, `errors`, `explain`, `replay`, the source and the sink).

The records topic is the source's `--topic`, the worker's `--input-topic` and explain's
`--records-topic`: all three read `OLSTREAM_RECORDS_TOPIC`. The events topic (the worker's
`--output-topic`, the sink's and the replay's `--topic`, explain's `--events-topic`) is
`OLSTREAM_EVENTS_TOPIC`; the sink's dead-letter topic `OLSTREAM_SINK_DLQ_TOPIC`; the worker's app
id `OLSTREAM_APP_ID`.
"""

from __future__ import annotations

from olstream.shared.config import Setting

RECORDS_TOPIC_ENV = "OLSTREAM_RECORDS_TOPIC"
EVENTS_TOPIC_ENV = "OLSTREAM_EVENTS_TOPIC"
SINK_DLQ_TOPIC_ENV = "OLSTREAM_SINK_DLQ_TOPIC"
WORKER_ERRORS_TOPIC_ENV = "OLSTREAM_WORKER_ERRORS_TOPIC"

APP_ID = Setting(
    "app_id",
    "olstream-stream",
    "the worker's faust app id: the consumer group of every replica, and the prefix of its state "
    "topics (`{app_id}-runs-changelog`)",
    env="OLSTREAM_APP_ID",
)
