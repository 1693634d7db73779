"""`olstream explain RUN`: one run's way through the pipeline (`olstream.operations.explain`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from olstream.cli.commands import resolve_unless_printed
from olstream.operations.explain import KINDS, ExplainRequest, check_subject, explain
from olstream.operations.settings import EXPLAIN
from olstream.shared.config import add_flags, add_print_config, help_text
from olstream.shared.errors import ConfigError, ExitCode, InfrastructureError, KafkaAuthError, OlstreamError
from olstream.shared.kafka_admin import check_connection
from olstream.shared.kafka_settings import connection_of
from olstream.shared.logs import redact, setup_logging
from olstream.shared.schema_registry import registry_connection_of
from olstream.streams import framed_input


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser(
        "explain",
        help="where a run is: its log records, the worker's state, its events, the DLQ, the sinks' commits",
    )
    p.add_argument(
        "run", metavar="RUN", help="an OpenLineage run id, an engine run id or a workflow instance"
    )
    p.add_argument(
        "--kind",
        choices=KINDS,
        default="auto",
        help=help_text(
            "what RUN is (auto: a UUID is tried as an OpenLineage run id, then as a name)", default="auto"
        ),
    )
    p.add_argument("--json", action="store_true", help=help_text("print the report as JSON", default="off"))
    add_flags(p, EXPLAIN)
    add_print_config(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    r = resolve_unless_printed("explain", EXPLAIN, args)
    if r is None:
        return ExitCode.OK
    setup_logging("text", "WARNING")
    request = ExplainRequest(
        subject=args.run,
        kind=args.kind,
        records_topic=r["records_topic"],
        events_topic=r["events_topic"],
        dlq_topics=r["dlq_topic"],
        app_id=r["app_id"],
        sink_groups=r["sink_groups"],
        max_runs=r["max_runs"],
        time_slack_s=r["time_slack"],
        threads=r["scan_threads"],
        timeout=r["wait"],
        log_url=r["log_url"],
    )
    try:
        check_subject(request.subject, request.kind)
        kafka = connection_of(r)
        try:
            check_connection(kafka, r["wait"])
            # both wire formats of the records topic (docs/contract.md#schema-registry)
            framing = framed_input.input_framing(registry_connection_of(r), request.records_topic)
        except InfrastructureError as e:  # Kafka or the schema registry unreachable: nothing was done
            raise ConfigError(str(e)) from e
        report = explain(kafka, request, framing)
    except KafkaAuthError as e:
        print(f"olstream explain: {e}", file=sys.stderr)
        return ExitCode.KAFKA_REFUSED
    except ConfigError as e:  # an unknown run, a missing topic
        print(f"olstream explain: {' '.join(redact(str(e)).split())}", file=sys.stderr)
        return ExitCode.CONFIG
    except OlstreamError as e:  # a broker that does not answer, a log that cannot be read
        print(f"olstream explain: {' '.join(redact(str(e)).split())}", file=sys.stderr)
        return ExitCode.FAILED
    print(report.to_json() if args.json else "\n".join(report.lines()))
    return ExitCode.OK
