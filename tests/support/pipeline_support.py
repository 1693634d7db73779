"""The whole pipeline as processes (source, workers, sink to a file) against a cluster of its own.

For the tests of production Kafka: a cluster started with `olstream.devkit.kafka_cluster` (several
nodes, or SASL_SSL) on ports of its own, a simulated event log that grows while the pipeline
runs, and the checks every such test makes of what the sink wrote.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from olstream.contract import codec
from olstream.contract.records import RunEnded, RunStarted
from olstream.devkit import kafka_cluster
from olstream.devkit.kafka_config import DEFAULT_KAFKA_VERSION, KafkaSettings
from olstream.devkit.process import free_port
from olstream.eventlog.simulate import BASE_TIME, simulate
from olstream.eventlog.stores import open_store
from olstream.shared.errors import InfrastructureError
from olstream.shared.kafka_settings import read_properties
from olstream.streams.mapping import TERMINAL_EVENT_TYPES
from tests.support.stream_support import OLSTREAM, env, tail

LOG_PARTITIONS = 8


@dataclass(frozen=True)
class LocalCluster:
    settings: KafkaSettings
    state: kafka_cluster.ClusterState

    @property
    def bootstrap(self) -> str:
        return self.state.bootstrap

    def restart_missing(self) -> kafka_cluster.ClusterState:
        """Start the nodes that do not run (after a kill -9), and wait until they are ready."""
        return kafka_cluster.start_cluster(self.settings)


@contextmanager
def local_cluster(data_dir: Path, brokers: int = 1, security: str = "plaintext") -> Iterator[LocalCluster]:
    """A cluster of its own (free ports, this data dir), stopped afterwards whatever happens."""
    last: Exception | None = None
    for _ in range(5):
        base = free_port(run=2 * brokers)
        settings = KafkaSettings(
            version=DEFAULT_KAFKA_VERSION,
            port=base,
            controller_port=base + 1,
            data_dir=data_dir,
            brokers=brokers,
            security=security,
            start_timeout=180.0,
        )
        try:
            state = kafka_cluster.start_cluster(settings)
            break
        except InfrastructureError as e:  # a port taken between the check and the start
            last = e
            kafka_cluster.stop_cluster(data_dir)
    else:
        raise AssertionError(f"no cluster could start: {last}")
    try:
        yield LocalCluster(settings, state)
    finally:
        kafka_cluster.stop_cluster(data_dir)


class GrowingLog:
    """A SQLite event log that the test extends with simulated runs (each phase new run ids)."""

    def __init__(self, path: Path) -> None:
        self.url = f"sqlite:///{path}"
        self.phases = 0
        store = open_store(self.url, partitions=LOG_PARTITIONS, create=True)
        store.close()

    def append(self, runs: int) -> None:
        self.phases += 1
        store = open_store(self.url)
        try:
            simulate(store, runs, seed=100 + self.phases, base_time=BASE_TIME + timedelta(days=self.phases))
        finally:
            store.close()

    def expected(self) -> tuple[set[str], dict[str, str]]:
        """(every started run, run -> its terminal event type) of the log as it is now."""
        store = open_store(self.url)
        starts: set[str] = set()
        ends: dict[str, str] = {}
        try:
            for p in store.partitions():
                after = -1
                while batch := store.read(p, after, 10_000):
                    for row in batch:
                        record = codec.decode(row.payload, row.partition, row.offset)
                        if isinstance(record, RunStarted):
                            starts.add(record.engine_run_id)
                        elif isinstance(record, RunEnded):
                            ends[record.engine_run_id] = TERMINAL_EVENT_TYPES[record.status.value]
                    after = batch[-1].offset
        finally:
            store.close()
        return starts, ends


@dataclass
class Pipeline:
    """Source, workers and sink (file transport) as processes; names of its own topics and groups."""

    work: Path
    bootstrap: str
    log_url: str
    name: str
    extra: tuple[str, ...] = ()  # every command's flags: security, replication
    workers: int = 2

    def __post_init__(self) -> None:
        self.input, self.output = f"{self.name}.eventlog", f"{self.name}.events"
        self.errors = f"{self.name}.errors"
        self.events_file = self.work / "events.jsonl"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def commands(self, until_idle: bool = False) -> dict[str, list[str]]:
        """Each process's command line, in the order they run with --until-idle."""
        idle = ["--until-idle"] if until_idle else []
        common = ["--bootstrap", self.bootstrap, *self.extra]
        out = {
            "source": [*OLSTREAM, "source", "--log", self.log_url, "--topic", self.input, *common,
                       *idle, *(["--idle-seconds", "0.5"] if until_idle else [])],
        }  # fmt: skip
        for i in range(self.workers):
            out[f"worker{i}"] = [
                *OLSTREAM, "worker", "--app-id", f"{self.name}-worker",
                "--data-dir", str(self.work / f"w{i}"),
                "--input-topic", self.input, "--output-topic", self.output, "--errors-topic", self.errors,
                "--session-timeout", "6", *common, *idle,
            ]  # fmt: skip
        out["sink"] = [
            *OLSTREAM, "sink", "--topic", self.output, "--group", f"{self.name}-sink",
            "--dlq-topic", f"{self.name}.dlq", "--file", str(self.events_file), *common, *idle,
        ]  # fmt: skip
        return out

    def log(self, name: str) -> Path:
        return self.work / f"{name}.log"

    def start(self, *names: str) -> None:
        for name, cmd in self.commands().items():
            if names and name not in names:
                continue
            with self.log(name).open("ab") as log:
                self.procs[name] = subprocess.Popen(
                    cmd, stdout=log, stderr=subprocess.STDOUT, env=env(), start_new_session=True
                )

    def check_running(self) -> None:
        for name, proc in self.procs.items():
            assert proc.poll() is None, f"{name} exited {proc.returncode}:\n{tail(self.log(name))}"

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(45)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def dump_tasks(self) -> None:
        dump_tasks([p for name, p in self.procs.items() if name.startswith("worker")])

    def logs(self, lines: int = 25) -> str:
        return "\n".join(f"--- {name}\n{tail(self.log(name), lines)}" for name in self.procs)

    def positions(self) -> dict[str, tuple[int, int]]:
        """(end offset, the reading group's committed offset) summed over each topic's partitions:
        which stage a stalled pipeline stands still in."""
        out = {}
        for topic, group in ((self.input, f"{self.name}-worker"), (self.output, f"{self.name}-sink")):
            # read_uncommitted: an open transaction of the group would make committed() time out
            # (see stop_support.committed_offsets)
            settings = {"isolation.level": "read_uncommitted", **self.kafka_properties()}
            c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, **settings})
            try:
                parts = list(c.list_topics(topic, timeout=10).topics[topic].partitions)
                ends = sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts)
                done = c.committed([TopicPartition(topic, p) for p in parts], timeout=10)
                out[topic] = (ends, sum(max(0, tp.offset) for tp in done))
            except KafkaException as e:  # a diagnosis must not hide the failure it explains
                out[topic] = (-1, -1)
                print(f"positions of {topic}: {e}")
            finally:
                c.close()
        return out

    def kafka_properties(self) -> dict[str, str]:
        if "--kafka-config" not in self.extra:
            return {}
        return read_properties(self.extra[self.extra.index("--kafka-config") + 1])

    def delivered(self) -> list[bytes]:
        """The sink file's complete lines (events as delivered, byte for byte), in order. The sink's
        writes are buffered (flushed and fsynced before its commits), so a running sink's file may
        end inside a line: that part is left for the next read."""
        if not self.events_file.exists():
            return []
        written = self.events_file.read_bytes()
        complete = written[: written.rfind(b"\n") + 1]
        return [line for line in complete.splitlines() if line.strip()]


def kafka_processes_of(data_dir: Path) -> list[int]:
    """The pids of the Kafka brokers (`kafka.Kafka`) whose command line names `data_dir`."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(data_dir) in cmdline and "kafka.Kafka" in cmdline:
                found.append(int(proc.name))
    return found


def dump_tasks(workers: Sequence[subprocess.Popen[bytes]]) -> None:
    """Each running worker logs where it reads its input, then its threads' stacks and asyncio tasks
    (SIGUSR1, docs/operations.md): where a stalled worker waits."""
    running = [p for p in workers if p.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGUSR1)
    if running:
        time.sleep(3.0)


def missing_events(lines: Sequence[bytes], starts: set[str], ends: dict[str, str]) -> list[str]:
    seen = {
        (doc["run"]["facets"]["workflow"]["engineRunId"], doc["eventType"]) for doc in map(json.loads, lines)
    }
    missing = [f"{rid} START" for rid in starts if (rid, "START") not in seen]
    return missing + [f"{rid} {kind}" for rid, kind in ends.items() if (rid, kind) not in seen]


def wait_until_delivered(
    pipeline: Pipeline, starts: set[str], ends: dict[str, str], timeout: float
) -> list[bytes]:
    deadline = time.monotonic() + timeout
    while True:
        lines = pipeline.delivered()
        missing = missing_events(lines, starts, ends)
        if not missing:
            return lines
        if time.monotonic() > deadline:
            pipeline.dump_tasks()
            raise AssertionError(
                f"{len(missing)} events not delivered after {timeout:.0f} s (e.g. {missing[:3]});\n"
                f"where each stage stands: {pipeline.positions()}\n" + pipeline.logs(60)
            )
        pipeline.check_running()
        time.sleep(1.0)


def wait_until_settled(pipeline: Pipeline, timeout: float) -> list[bytes]:
    """Wait until the workers' group has committed the whole input and the sink's group the whole
    output; then the delivered events are final. Events present is not enough: after a rebalance a
    worker or the sink delivers again from its group's last commit, and stopping it in the middle of
    that repeat would cut a run's repeated START off from its repeated terminal event."""
    deadline = time.monotonic() + timeout
    while True:
        positions = pipeline.positions()
        if all(end == done >= 0 for end, done in positions.values()):
            return pipeline.delivered()
        if time.monotonic() > deadline:
            pipeline.dump_tasks()
            raise AssertionError(
                f"not settled after {timeout:.0f} s: (end, committed) per topic {positions}\n"
                + pipeline.logs(60)
            )
        pipeline.check_running()
        time.sleep(1.0)


def assert_complete_identical_and_ordered(
    lines: Sequence[bytes], starts: set[str], ends: dict[str, str]
) -> int:
    """Every run's START and terminal event, nothing else; repeats byte-identical; per run START
    first and the terminal event last. Returns the number of repeats."""
    assert not missing_events(lines, starts, ends)
    copies: dict[tuple[str, str], set[bytes]] = defaultdict(set)
    per_run: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        doc = json.loads(line)
        rid = doc["run"]["facets"]["workflow"]["engineRunId"]
        copies[(doc["run"]["runId"], doc["eventType"])].add(line)
        per_run[rid].append(doc["eventType"])
    differing = [k for k, v in copies.items() if len(v) > 1]
    assert not differing, f"repeats that differ: {differing[:3]}"
    assert set(per_run) == starts, f"events of runs never started: {sorted(set(per_run) - starts)[:3]}"
    for rid, types in per_run.items():
        assert types[0] == "START", (rid, types)
        if rid in ends:
            assert types[-1] == ends[rid] and set(types) == {"START", ends[rid]}, (rid, types)
        else:
            assert set(types) == {"START"}, (rid, types)
    return len(lines) - len(copies)
