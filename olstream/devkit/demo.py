"""`olstream demo`: the whole pipeline on one machine, as separate processes, with progress bars.

simulator -> SQLite event log -> `olstream source` -> olstream.eventlog -> N x `olstream worker`
-> openlineage.events -> `olstream sink` -> lineage.jsonl (or an OpenLineage URL) -> lineage.svg
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from olstream.contract.topics import EVENTLOG, RUN_EVENTS, SINK_DLQ
from olstream.devkit.demo_report import WorkerFigures, cut_off_children, summary_rows, worker_figures
from olstream.devkit.demo_support import (
    Children,
    FileFollower,
    LogCounts,
    OutputTally,
    count_log,
    first_error,
)
from olstream.devkit.process import free_port
from olstream.shared.config import redact_url, resolve
from olstream.shared.errors import ConfigError, InfrastructureError

if TYPE_CHECKING:
    from olstream.devkit.demo_kafka import Rejections

log = logging.getLogger(__name__)

LOG_PARTITIONS = 8
STALL_SECONDS = 90.0


@dataclass(frozen=True)
class DemoSettings:
    runs: int
    workers: int
    out: Path
    graph: Path
    url: str | None
    marquez: bool
    bootstrap: str | None
    partitions: int
    seed: int | None
    base_time: datetime | None  # None: the simulated span ends when the demo starts
    timeout: float
    keep: bool


@dataclass(frozen=True)
class Topics:
    eventlog: str
    events: str
    sink_group: str
    app_id: str
    dlq: str


def demo_settings(values: Mapping[str, Any]) -> DemoSettings:
    """The demo's settings from the resolved `demo` settings (olstream.devkit.settings.DEMO)."""
    if values["url"] and values["marquez"]:
        raise ConfigError("--url and --marquez exclude each other")
    out = Path(values["out"])
    return DemoSettings(
        runs=values["runs"],
        workers=values["workers"],
        out=out.expanduser().resolve(),
        graph=(Path(values["graph"]) if values["graph"] else out.with_suffix(".svg")).expanduser().resolve(),
        url=values["url"],
        marquez=values["marquez"],
        bootstrap=values["bootstrap"] or None,
        partitions=values["partitions"],
        seed=values["seed"],
        base_time=values["base_time"],
        timeout=values["time_limit"],
        keep=values["keep"],
    )


def topics_for(own_broker: bool, tag: str) -> Topics:
    """Default names on a broker the demo owns; unique names on a shared one (replays stay apart)."""
    if own_broker:
        return Topics(EVENTLOG, RUN_EVENTS, "olstream-sink", "olstream-worker", SINK_DLQ)
    return Topics(
        f"{EVENTLOG}.demo-{tag}",
        f"{RUN_EVENTS}.demo-{tag}",
        f"olstream-sink-demo-{tag}",
        f"olstream-worker-demo-{tag}",
        f"{SINK_DLQ}.demo-{tag}",
    )


class Demo:
    def __init__(self, settings: DemoSettings, console: Console) -> None:
        self.s = settings
        self.console = console
        self.tag = uuid.uuid4().hex[:8]
        self.work = Path(tempfile.mkdtemp(prefix="olstream-demo-"))
        self.broker_dir: Path | None = None
        env = {k: v for k, v in os.environ.items() if k != "OLSTREAM_METRICS_PORT"}
        self.children = Children(self.work, {**env, "PYTHONUNBUFFERED": "1"})
        self.failed = False

    # -- infrastructure -------------------------------------------------------------------------
    def start_broker(self) -> str:
        if self.s.bootstrap:
            return self.s.bootstrap
        from olstream.devkit import kafka
        from olstream.devkit.kafka_config import KafkaSettings
        from olstream.devkit.settings import KAFKA_VERSION

        port = free_port()
        self.broker_dir = self.work / "kafka"
        settings = KafkaSettings(
            version=resolve("kafka", (KAFKA_VERSION,), {}, os.environ)["version"],
            port=port,
            controller_port=free_port(avoid=frozenset({port})),
            data_dir=self.broker_dir,
        )
        with self.console.status("starting a local Kafka broker ..."):
            state, _ = kafka.start_broker(settings)
        self.console.print(f"[green]✓[/] Kafka broker at {state.bootstrap} (stopped at the end)")
        return state.bootstrap

    def receiver_url(self) -> str | None:
        if not self.s.marquez:
            return self.s.url
        from olstream.devkit import marquez
        from olstream.devkit.settings import MARQUEZ_UP, local_postgres

        with self.console.status("starting Marquez ..."):
            values = resolve("marquez", MARQUEZ_UP, {}, os.environ).values
            url = marquez.up(marquez.settings_of(values, local_postgres(os.environ)))
        self.console.print(f"[green]✓[/] Marquez API at {url} (left running: `olstream marquez down`)")
        return url

    # -- pipeline -------------------------------------------------------------------------------
    def simulate(self, log_url: str) -> LogCounts:
        """Write the seeded workload in-process (what `olstream log simulate` does) and count it.

        Without --base-time the simulated span ends now, so a receiver's views of today (Marquez's
        dashboard and Events page) show it; --base-time gives the same log on every run.
        """
        from olstream.eventlog.simulate import base_time_ending, simulate
        from olstream.eventlog.stores import open_store

        seed = self.s.seed if self.s.seed is not None else 0
        with self.console.status(f"simulating {self.s.runs} workflow runs into {log_url} ..."):
            base_time = self.s.base_time
            if base_time is None:
                now = datetime.now(UTC).replace(microsecond=0)
                base_time = base_time_ending(now, self.s.runs, seed, partitions=LOG_PARTITIONS)
            store = open_store(log_url, partitions=LOG_PARTITIONS, create=True)
            try:
                summary = simulate(store, self.s.runs, seed, base_time=base_time)
            finally:
                store.close()
            counts = count_log(log_url)
        self.console.print(
            f"[green]✓[/] event log: {counts.records} records, {counts.runs_started} runs started, "
            f"{counts.runs_finished} finished, dated {summary.first_time:%Y-%m-%d %H:%M} to "
            f"{summary.last_time:%H:%M} UTC"
            + (
                ""
                if summary.last_time.date() == summary.first_time.date()
                else f" ({summary.last_time:%Y-%m-%d})"
            )
        )
        return counts

    def start_pipeline(self, bootstrap: str, topics: Topics, log_url: str, url: str | None) -> None:
        b = ["--bootstrap", bootstrap]
        self.children.start("source", ["source", "--log", log_url, *b, "--topic", topics.eventlog])
        for i in range(self.s.workers):
            self.children.start(
                f"worker-{i + 1}",
                ["worker", *b, "--app-id", topics.app_id, "--data-dir", str(self.work / f"worker-{i + 1}"),
                 "--input-topic", topics.eventlog, "--output-topic", topics.events,
                 "--running-events", "on"],  # the demo shows open runs' datasets, whatever the default
                metrics_port=free_port(),
            )  # fmt: skip
        target = ["--url", url] if url else ["--file", str(self.s.out)]
        self.children.start(
            "sink",
            [
                *("sink", *b, "--topic", topics.events, "--group", topics.sink_group),
                *("--dlq-topic", topics.dlq, *target),
            ],
        )

    def wait(self, bootstrap: str, topics: Topics, counts: LogCounts, url: str | None) -> OutputTally:
        """Follow each stage until every finished run's terminal event is delivered."""
        from olstream.devkit.demo_kafka import OffsetWatcher, TopicFollower

        watcher = OffsetWatcher(bootstrap)
        observed = OutputTally()
        delivered = OutputTally()
        follower = TopicFollower(bootstrap, topics.events, f"olstream-demo-observer-{self.tag}")
        file_follower = FileFollower(self.s.out)
        expected_events = counts.runs_started + counts.runs_finished + counts.running_events
        columns = (
            TextColumn("{task.description:<34}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        deadline = time.monotonic() + self.s.timeout
        last_progress: tuple[int, int, int] = (-1, -1, -1)
        last_change = time.monotonic()
        try:
            with Progress(*columns, console=self.console) as bars:
                src = bars.add_task(f"source → {topics.eventlog}", total=counts.records)
                stream = bars.add_task(f"workers x{self.s.workers} → events", total=expected_events)
                sink = bars.add_task(
                    "sink → " + (redact_url(url) if url else self.s.out.name), total=expected_events
                )
                while True:
                    self.children.check_alive(c.name for c in self.children.started if c.name != "simulate")
                    for raw in follower.poll():
                        observed.add(raw)
                    published = watcher.end_total(topics.eventlog)
                    published += watcher.end_total(topics.eventlog + ".errors")
                    if url:
                        committed, end = watcher.group_position(topics.sink_group, topics.events)
                        sent = len(observed.events) if end and committed >= end else min(committed, end)
                        finished = observed.complete(counts) and bool(end) and committed >= end
                    else:
                        for line in file_follower.new_lines():
                            delivered.add(line)
                        sent = len(delivered.events)
                        finished = delivered.complete(counts)
                    bars.update(src, completed=min(published, counts.records))
                    bars.update(stream, completed=len(observed.events))
                    bars.update(sink, completed=sent)
                    if finished:
                        return observed if url else delivered
                    progress = (published, len(observed.events), sent)
                    now = time.monotonic()
                    if progress != last_progress:
                        last_progress, last_change = progress, now
                    elif now - last_change > STALL_SECONDS:
                        raise InfrastructureError(self.stall_report(progress, counts, expected_events))
                    if now > deadline:
                        raise InfrastructureError(
                            f"not finished after {self.s.timeout:.0f}s: {len(observed.terminal_runs)} of "
                            f"{counts.runs_finished} terminal events on {topics.events}, "
                            f"{len(delivered.terminal_runs)} delivered"
                        )
                    time.sleep(0.5)
        finally:
            follower.close()

    def stall_report(self, progress: tuple[int, int, int], counts: LogCounts, expected: int) -> str:
        """Which stage stopped moving, with the first error line of its processes."""
        published, observed, sent = progress
        if published < counts.records:
            stage, prefix = f"the source ({published} of {counts.records} records published)", "source"
        elif observed < expected:
            stage, prefix = f"the workers ({observed} of {expected} events emitted)", "worker"
        else:
            stage, prefix = f"the sink ({sent} of {expected} events delivered)", "sink"
        errors = [
            f"  {c.name}: {first_error(c.log_path)}"
            for c in self.children.started
            if c.name.startswith(prefix) and first_error(c.log_path)
        ]
        return f"no progress for {STALL_SECONDS:.0f}s in {stage}" + (
            "\n" + "\n".join(errors) if errors else ""
        )

    def worker_figures(self) -> WorkerFigures:
        workers = [c for c in self.children.started if c.name.startswith("worker")]
        return worker_figures([c.metrics_port for c in workers], [c.log_path for c in workers])

    def run(self) -> int:
        started = time.monotonic()
        url = self.receiver_url()  # first: a receiver that cannot start fails before anything else runs
        bootstrap = self.start_broker()
        topics = topics_for(self.s.bootstrap is None, self.tag)
        self.ensure_topics(bootstrap, topics)
        if not url:
            self.s.out.unlink(missing_ok=True)
        counts = self.simulate(f"sqlite:///{self.work / 'events.db'}")
        self.start_pipeline(bootstrap, topics, f"sqlite:///{self.work / 'events.db'}", url)
        tally = self.wait(bootstrap, topics, counts, url)
        figures = self.worker_figures()
        with self.console.status("stopping source, workers and sink ..."):
            self.children.stop()
        from olstream.devkit.demo_kafka import read_rejections

        rejected = read_rejections(bootstrap, topics.dlq)
        if url:
            self.s.out.parent.mkdir(parents=True, exist_ok=True)
            self.s.out.write_bytes(b"".join(sorted(raw + b"\n" for raw in tally.seen)))
        self.report(counts, tally, figures, time.monotonic() - started, url, rejected)
        cut_off = cut_off_children(counts, tally)
        if cut_off:
            self.console.print(
                f"[red]✗[/] {len(cut_off)} child run(s) whose parent is in the log lack their parent edge, "
                f"for example engine run id {cut_off[0]}"
            )
            return 1
        if self.s.bootstrap:
            topic_args = " ".join(
                f"--topic {t}" for t in (topics.eventlog, topics.eventlog + ".errors", topics.events)
            )
            self.console.print(f"offsets and lag: olstream status --bootstrap {bootstrap} {topic_args}")
        if rejected.total:
            self.console.print(
                f"[red]✗[/] the receiver rejected {rejected.total} event(s); they are in {topics.dlq} "
                "(headers olstream.status, olstream.response)"
            )
            return 1
        return 0

    def ensure_topics(self, bootstrap: str, topics: Topics) -> None:
        from olstream.devkit.demo_kafka import OffsetWatcher, warm_up_group_coordinator
        from olstream.shared.kafka_admin import ensure_topic

        watcher = OffsetWatcher(bootstrap)
        # The source's errors topic too: a topic must have its leaders before a client scans it.
        for name in (topics.eventlog, topics.eventlog + ".errors", topics.events, topics.dlq):
            ensure_topic(bootstrap, name, self.s.partitions)
            watcher.wait_ready(name)
        if self.broker_dir is not None:
            warm_up_group_coordinator(bootstrap, topics.events, f"olstream-demo-warmup-{self.tag}")

    def report(
        self,
        counts: LogCounts,
        tally: OutputTally,
        figures: WorkerFigures,
        elapsed: float,
        url: str | None,
        rejected: Rejections,
    ) -> None:
        from olstream.devkit.graph import build_graph, render

        lineage = build_graph(tally.events)
        table = Table(title="olstream demo", show_header=False)
        table.add_column(justify="left")
        table.add_column(justify="right")
        rows = summary_rows(
            counts, tally, lineage.summary(), lineage.events_by_type, figures, rejected, elapsed
        )
        for key, value in rows:
            table.add_row(key, str(value))
        self.console.print(table)
        try:
            render(lineage, self.s.graph, f"olstream demo: {counts.runs_started} runs")
            self.console.print(f"[green]✓[/] graph: {self.s.graph}")
        except ConfigError as e:
            self.console.print(f"[yellow]graph not rendered:[/] {e}")
        where = f"posted to {redact_url(url)} (copy in {self.s.out})" if url else f"written to {self.s.out}"
        self.console.print(f"[green]✓[/] events {where}")
        if self.s.marquez and url:
            self.console.print(
                f"Open Marquez: {redact_url(url)}/api/v1/namespaces (web UI: run marquez-web against it)"
            )

    def close(self) -> None:
        self.children.stop()
        if self.broker_dir is not None:
            from olstream.devkit import kafka

            kafka.stop_broker(self.broker_dir)
        if self.s.keep or (self.failed and self.children.started):
            self.console.print(f"work directory (process logs): {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(settings: DemoSettings) -> int:
    """Run the demo; SIGTERM and Ctrl-C stop every process and broker it started."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    console = Console()
    demo = Demo(settings, console)
    try:
        return demo.run()
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: stopping everything the demo started[/]")
        return 130
    except BaseException:
        demo.failed = True
        raise
    finally:
        demo.close()
