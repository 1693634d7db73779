"""`olstream sink`: deliver the JSON RunEvents of a Kafka topic to an OpenLineage receiver, file or stdout."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from olstream.shared.errors import OlstreamError
from olstream.shared.logs import redact, setup_logging

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `olstream sink`."""
    p = subparsers.add_parser(
        "sink",
        help="deliver OpenLineage events from Kafka to an HTTP receiver, a file or stdout (at-least-once)",
        description="Consume JSON RunEvents and deliver them at-least-once, in per-key order. "
        "Flags win over OPENLINEAGE_URL / OPENLINEAGE_ENDPOINT / OPENLINEAGE_API_KEY, which win over "
        "the transport section of openlineage.yml (OPENLINEAGE_CONFIG).",
    )
    p.add_argument("--bootstrap", help="Kafka bootstrap (env OLSTREAM_BOOTSTRAP; default 127.0.0.1:9092)")
    p.add_argument("--topic", help="topic to consume (env OLSTREAM_SINK_TOPIC; default openlineage.events)")
    p.add_argument("--group", help="consumer group (env OLSTREAM_SINK_GROUP; default olstream-sink)")
    p.add_argument("--instance-id", help="static group membership id: a restarted sink takes over at once")
    dest = p.add_argument_group("destination")
    dest.add_argument("--url", help="receiver base URL (env OPENLINEAGE_URL; yml transport.url)")
    dest.add_argument(
        "--endpoint", help="path after the URL (env OPENLINEAGE_ENDPOINT; default api/v1/lineage)"
    )
    dest.add_argument("--api-key-file", help="file with the bearer API key (env OPENLINEAGE_API_KEY)")
    dest.add_argument("--ca-file", help="extra CA bundle for TLS (verification is always on)")
    dest.add_argument("--file", help="append NDJSON to this file instead (fsynced before each commit)")
    dest.add_argument("--console", action="store_true", default=None, help="one event per line on stdout")
    tune = p.add_argument_group("delivery")
    tune.add_argument("--concurrency", type=int, help="requests in flight at most (default 16)")
    tune.add_argument("--batch-size", type=int, help="POST up to N events to {url}/batch (default 0: off)")
    tune.add_argument("--connect-timeout", type=float, help="seconds to connect (default 5)")
    tune.add_argument("--timeout", type=float, help="seconds per request (default 15; yml transport.timeout)")
    tune.add_argument("--max-backoff", type=float, help="longest backoff wait in seconds (default 300)")
    tune.add_argument("--max-buffered", type=int, help="events held in memory before pausing (default 5000)")
    tune.add_argument("--commit-interval", type=float, help="seconds between offset commits (default 1)")
    tune.add_argument("--dlq-topic", help="dead-letter topic (default openlineage.events.dlq)")
    p.add_argument(
        "--dry-run", action="store_true", default=None, help="print what would be sent; send nothing"
    )
    p.add_argument("--until-idle", action="store_true", default=None, help="exit 0 once all is delivered")
    p.add_argument("--print-config", action="store_true", help="print the effective settings, redacted")
    p.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics here (0 = off)")
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, args.log_level)
    from olstream.connectors.sink.settings import build_settings

    try:
        settings = build_settings(vars(args), os.environ, Path.cwd())
    except OlstreamError as e:
        log.error("%s", e)
        return 2
    if args.print_config:
        sys.stdout.write(redact(json.dumps(settings.describe(), indent=2)) + "\n")
        return 0
    try:
        instance_id = args.instance_id or os.environ.get("OLSTREAM_SINK_INSTANCE_ID")
        return asyncio.run(run_sink(settings, instance_id))
    except OlstreamError as e:
        log.error("%s", e)
        return 1
    except KafkaException as e:
        log.error("Kafka at %s: %s", settings.bootstrap, e)
        return 1


async def run_sink(settings: Any, instance_id: str | None) -> int:
    from confluent_kafka import Consumer, Producer

    from olstream.connectors.sink.sink import Sink
    from olstream.connectors.sink.transports import make_transport
    from olstream.shared.kafka_admin import ensure_topic, topic_partitions
    from olstream.shared.metrics import serve_metrics

    if settings.metrics_port:
        serve_metrics(settings.metrics_port)
    log.info(
        "sink: %s -> %s (group %s, concurrency %d%s)",
        settings.topic,
        settings.destination,
        settings.group,
        settings.concurrency,
        ", dry run" if settings.dry_run else "",
    )
    dlq = None
    if not settings.dry_run:
        partitions = topic_partitions(settings.bootstrap, settings.topic) or 1
        ensure_topic(settings.bootstrap, settings.dlq_topic, partitions)
        dlq = Producer({"bootstrap.servers": settings.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    consumer = Consumer(consumer_config(settings, instance_id))
    sink = Sink(settings, make_transport(settings), consumer, dlq)
    return await sink.run()


def consumer_config(settings: Any, instance_id: str | None = None) -> dict[str, Any]:
    """Manual commits only (`enable.auto.commit=false`): offsets move when the sink says so."""
    config: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap,
        "group.id": settings.group,
        "client.id": "olstream-sink",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 100,
    }
    if instance_id:
        config["group.instance.id"] = instance_id  # static membership: a restart takes over at once
    return config
