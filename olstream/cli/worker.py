"""``olstream worker``: the lineage stream (faust worker)."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from olstream.shared.errors import ConfigError
from olstream.shared.logs import setup_logging
from olstream.shared.metrics import serve_metrics
from olstream.streams.mapping import JOB_NAMES, MappingConfig
from olstream.streams.settings import (
    DEFAULT_ERRORS_TOPIC,
    DEFAULT_INPUT_TOPIC,
    DEFAULT_OUTPUT_TOPIC,
    WorkerSettings,
)

log = logging.getLogger(__name__)


def _env(name: str, default: str) -> str:
    return os.environ.get(f"OLSTREAM_{name}", default)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser(
        "worker", help="run the lineage stream: event-log records -> OpenLineage RunEvents"
    )
    p.add_argument("--bootstrap", default=None, help="Kafka bootstrap HOST:PORT (env OLSTREAM_BOOTSTRAP)")
    p.add_argument("--app-id", default=None, help="faust app id = consumer group (env OLSTREAM_APP_ID)")
    p.add_argument("--data-dir", default=None, help="RocksDB table directory (env OLSTREAM_DATA_DIR)")
    p.add_argument("--input-topic", default=None, help=f"default {DEFAULT_INPUT_TOPIC}")
    p.add_argument("--output-topic", default=None, help=f"default {DEFAULT_OUTPUT_TOPIC}")
    p.add_argument("--errors-topic", default=None, help=f"default {DEFAULT_ERRORS_TOPIC}")
    p.add_argument("--partitions", type=int, default=None, help="partitions of a created input topic (6)")
    p.add_argument("--until-idle", action="store_true", help="exit 0 once the input is consumed to its end")
    p.add_argument(
        "--retention", type=float, default=None, help="seconds of record time finished runs are kept"
    )
    p.add_argument("--job-prefix", default=None, help="prefix before every job name (once, at the front)")
    p.add_argument(
        "--job-names",
        choices=JOB_NAMES,
        default=None,
        help="hierarchical: a child's job is its parent's job name + '.' + its own (default); "
        "flat: {workflowType}@{version} alone (env OLSTREAM_JOB_NAMES)",
    )
    p.add_argument("--producer", default=None, help="the RunEvents' producer URL")
    p.add_argument("--integration", default=None, help="jobType facet integration (OLSTREAM)")
    p.add_argument("--programming-language", default=None, help="errorMessage facet language (PYTHON)")
    p.add_argument("--batch-size", type=int, default=None, help="records per processing batch (5000)")
    p.add_argument(
        "--batch-seconds", type=float, default=None, help="max age of a batch before it is flushed (0.25)"
    )
    p.add_argument(
        "--session-timeout", type=float, default=None, help="consumer group session timeout s (10)"
    )
    p.add_argument("--metrics-port", type=int, default=None, help="Prometheus port (0 = off)")
    p.add_argument("--log-format", choices=("text", "json"), default=None)
    p.add_argument("--log-level", default=None)
    p.set_defaults(func=main)


def build_settings(args: argparse.Namespace) -> WorkerSettings:
    def pick(flag: Any, env: str, default: str) -> str:
        return str(flag) if flag is not None else _env(env, default)

    try:
        base = MappingConfig()
        mapping = MappingConfig(
            producer=pick(args.producer, "PRODUCER", base.producer),
            job_prefix=pick(args.job_prefix, "JOB_PREFIX", base.job_prefix),
            job_names=pick(args.job_names, "JOB_NAMES", base.job_names),
            integration=pick(args.integration, "INTEGRATION", base.integration),
            programming_language=pick(
                args.programming_language, "PROGRAMMING_LANGUAGE", base.programming_language
            ),
        )
        return WorkerSettings(
            bootstrap=pick(args.bootstrap, "BOOTSTRAP", "127.0.0.1:9092"),
            app_id=pick(args.app_id, "APP_ID", "olstream-stream"),
            data_dir=pick(args.data_dir, "DATA_DIR", "./olstream-data"),
            input_topic=pick(args.input_topic, "INPUT_TOPIC", DEFAULT_INPUT_TOPIC),
            output_topic=pick(args.output_topic, "OUTPUT_TOPIC", DEFAULT_OUTPUT_TOPIC),
            errors_topic=pick(args.errors_topic, "ERRORS_TOPIC", DEFAULT_ERRORS_TOPIC),
            default_partitions=int(pick(args.partitions, "PARTITIONS", "6")),
            until_idle=bool(args.until_idle),
            retention_ms=int(float(pick(args.retention, "RETENTION_SECONDS", "3600")) * 1000),
            batch_size=int(pick(args.batch_size, "BATCH_SIZE", "5000")),
            metrics_port=int(pick(args.metrics_port, "METRICS_PORT", "0")),
            batch_within=float(pick(args.batch_seconds, "BATCH_SECONDS", "0.25")),
            session_timeout=float(pick(args.session_timeout, "SESSION_TIMEOUT", "10")),
            mapping=mapping,
        )
    except ValueError as e:
        raise ConfigError(f"invalid worker setting: {e}") from e


def main(args: argparse.Namespace) -> int:
    setup_logging(args.log_format or _env("LOG_FORMAT", "text"), args.log_level or _env("LOG_LEVEL", "INFO"))
    settings = build_settings(args)
    # faust is imported here so that `olstream --help` and other commands stay light
    import faust

    from olstream.streams.runtime.agent import attach
    from olstream.streams.runtime.app import build_app, prepare_topics

    partitions = prepare_topics(settings)
    sa = build_app(settings, partitions)
    attach(sa)
    if settings.metrics_port:
        serve_metrics(settings.metrics_port)
    log.info(
        "worker %s: %s (%d partitions) -> %s, data dir %s",
        settings.app_id,
        settings.input_topic,
        partitions,
        settings.output_topic,
        settings.data_dir,
    )
    worker = faust.Worker(sa.app, loglevel=logging.getLogger().level, override_logging=False, quiet=True)
    try:
        worker.execute_from_commandline()
    except SystemExit as e:
        return int(e.code or 0)
    return 0
