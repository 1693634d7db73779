"""Helpers for the stream worker's integration tests: feed records, run workers, read events."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from olstream.connectors.source.resume import placement_of
from olstream.contract import codec, wire
from olstream.contract.naming import job_segment
from olstream.contract.records import Record, RunStarted
from olstream.eventlog.simulate import SimulationSummary, simulate
from olstream.eventlog.store import StoredRow
from olstream.eventlog.stores import open_store

REPO = Path(__file__).resolve().parents[2]
OLSTREAM = [sys.executable, "-m", "olstream"]


def simulated_rows(
    tmp: Path, runs: int, seed: int, partitions: int = 8
) -> tuple[list[StoredRow], SimulationSummary]:
    """Every row of a freshly simulated SQLite log, partition by partition in offset order."""
    store = open_store(f"sqlite:///{tmp / f'sim-{seed}-{runs}.db'}", partitions=partitions, create=True)
    try:
        summary = simulate(store, runs, seed)
        rows: list[StoredRow] = []
        for p in store.partitions():
            after = -1
            while True:
                batch = store.read(p, after, 10_000)
                if not batch:
                    break
                rows.extend(batch)
                after = batch[-1].offset
        return rows, summary
    finally:
        store.close()


def headers_for(
    partition: int, offset: int, payload: bytes, heads: bytes | None = None
) -> list[tuple[str, bytes]]:
    """The source's headers of a row (docs/contract.md); `heads` (`wire.encode_heads`) go on a RunStarted."""
    name = codec.peek_record_name(payload)
    headers = [
        ("olstream.partition", str(partition).encode()),
        ("olstream.offset", str(offset).encode()),
        ("olstream.type", name.encode()),
        ("olstream.fingerprint", payload[2 : codec.HEADER_LEN].hex().encode()),
    ]
    if heads is not None and name == "RunStarted":
        headers.append((wire.HEADER_HEADS, heads))
    return headers


def heads_of(rows: Iterable[StoredRow]) -> bytes:
    """The heads of a log holding these rows: what the source puts on a RunStarted it read from it."""
    heads: dict[int, int] = {}
    for row in rows:
        heads[row.partition] = max(row.offset, heads.get(row.partition, -1))
    return wire.encode_heads(heads)


def produce_rows(
    bootstrap: str, topic: str, rows: Iterable[StoredRow], heads: dict[int, int] | None = None
) -> int:
    """Publish rows as the source connector does: key = log partition, Kafka partition = the topic's
    recorded placement of it (recorded now if none is: docs/contract.md), value = the stored bytes,
    and on every RunStarted the heads of the log these rows make up (every row was there when read),
    or `heads` when given (rows appended to a log published before)."""
    rows = list(rows)
    encoded_heads = heads_of(rows) if heads is None else wire.encode_heads(heads)
    placement = placement_of(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    n = 0
    for row in rows:
        while True:
            try:
                p.produce(
                    topic,
                    row.payload,
                    str(row.partition).encode(),
                    placement.kafka_partition(row.partition),
                    headers=headers_for(row.partition, row.offset, row.payload, encoded_heads),
                )
                break
            except BufferError:
                p.poll(0.1)
        n += 1
    assert p.flush(60) == 0
    return n


def produce_records(
    bootstrap: str, topic: str, records: Sequence[Record], heads: dict[int, int] | None = None
) -> int:
    return produce_rows(
        bootstrap, topic, (StoredRow(r.partition, r.offset, codec.encode(r)) for r in records), heads
    )


def produce_raw(bootstrap: str, topic: str, key: bytes, value: bytes) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, value, key)
    assert p.flush(30) == 0


@dataclass(frozen=True)
class Out:
    """A message read back from a topic (a header without a value: b"")."""

    key: bytes
    value: bytes
    partition: int
    offset: int
    headers: tuple[tuple[str, bytes], ...]

    @property
    def doc(self) -> dict:  # type: ignore[type-arg]
        return json.loads(self.value)  # type: ignore[no-any-return]


def out_of(m: Message) -> Out:
    headers = tuple((k, v or b"") for k, v in m.headers() or ())
    return Out(m.key(), m.value(), m.partition(), m.offset(), headers)


def repeats(values: Iterable[bytes]) -> int:
    """How many of `values` repeat an earlier one (an event's bytes are unique to its run and type:
    under exactly_once a read_committed reader of the events topic sees none)."""
    values = list(values)
    return len(values) - len(set(values))


def consume_all(
    bootstrap: str, topic: str, *, expect: int | None = None, idle: float = 3.0, timeout: float = 120.0
) -> list[Out]:
    """Read the topic from the start until `expect` messages (if given) and `idle` quiet seconds (the
    tests' one reader of what a topic holds: events, error records, a sink's DLQ)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}-{time.time_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    out: list[Out] = []
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            batch = c.consume(10_000, 0.5)
            if not batch:
                if time.monotonic() - quiet_since >= idle and (expect is None or len(out) >= expect):
                    break
                continue
            quiet_since = time.monotonic()
            for m in batch:
                assert m.error() is None, m.error()
                out.append(out_of(m))
    finally:
        c.close()
    return out


def worker_cmd(
    bootstrap: str,
    app_id: str,
    data_dir: Path,
    input_topic: str,
    output_topic: str,
    errors_topic: str,
    *extra: str,
) -> list[str]:
    return [
        *OLSTREAM, "worker", "--bootstrap", bootstrap, "--app-id", app_id, "--data-dir", str(data_dir),
        "--input-topic", input_topic, "--output-topic", output_topic, "--errors-topic", errors_topic, *extra,
    ]  # fmt: skip


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), e.get("PYTHONPATH", "")]))
    e["PYTHONUNBUFFERED"] = "1"
    return e


def start_worker(cmd: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    log = log_path.open("wb")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env(), start_new_session=True)


def run_until_idle(cmd: list[str], log_path: Path, timeout: float = 240.0) -> None:
    proc = start_worker([*cmd, "--until-idle"], log_path)
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"worker did not go idle in {timeout} s; log:\n{tail(log_path)}") from None
    assert rc == 0, f"worker exited {rc}; log:\n{tail(log_path)}"


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def metric(port: int, name: str) -> float | None:
    """A worker's unlabelled metric as its /metrics serves it (None while it does not serve yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return None


def wait_for(what: str, done: Callable[[], bool], timeout: float, *logs: Path, every: float = 0.2) -> None:
    """Until `done()`; an AssertionError naming `what` and the tails of `logs` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s\n" + "\n".join(tail(p) for p in logs))
        time.sleep(every)


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def expected_job_paths(starts: dict[str, RunStarted]) -> dict[str, tuple[str, bool]]:
    """engine run id -> (the job path the docs promise, whether the run keeps its parent edge).

    The rule of docs/naming.md, from the durable records alone: a root is its own segment; a child
    extends its parent's path when its record carries the parent's full coordinates and path, or
    names the parent as its root too, or when the parent's RunStarted is in the log, on any log
    partition (the run directory finds it, for records with the source's heads); otherwise (the
    parent is in no log partition) it is named as a root and has no parent edge.
    """
    out: dict[str, tuple[str, bool]] = {}

    def path(rid: str) -> tuple[str, bool]:
        if rid in out:
            return out[rid]
        r = starts[rid]
        own = job_segment(r.workflow_type, r.workflow_version)
        p = r.parent
        result = (own, False)
        if p is None:
            result = (own, False)
        elif p.is_complete and p.job_name is not None:
            # the writer's path for the parent must be the one the parent got
            assert p.engine_run_id not in starts or path(p.engine_run_id)[0] == p.job_name, rid
            result = (f"{p.job_name}.{own}", True)
        elif p.is_complete and r.root is not None and r.root.engine_run_id == p.engine_run_id:
            result = (f"{job_segment(p.workflow_type or '', p.workflow_version or '')}.{own}", True)
        elif p.engine_run_id in starts:
            result = (f"{path(p.engine_run_id)[0]}.{own}", True)
        out[rid] = result
        return result

    for rid in starts:
        path(rid)
    return out


class Follower:
    """Reads a topic incrementally from its start."""

    def __init__(self, bootstrap: str, topic: str, *, from_end: bool = False) -> None:
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"follow-{topic}-{time.time_ns()}",
                "auto.offset.reset": "latest" if from_end else "earliest",
                "enable.auto.commit": False,
            }
        )
        meta = self.c.list_topics(topic, timeout=10)
        parts = list(meta.topics[topic].partitions)
        tps = []
        for p in parts:
            low, high = self.c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            tps.append(TopicPartition(topic, p, high if from_end else low))
        self.c.assign(tps)
        self.seen: list[Out] = []

    def poll(self, seconds: float = 0.5) -> int:
        batch = self.c.consume(10_000, seconds)
        for m in batch:
            assert m.error() is None, m.error()
            self.seen.append(out_of(m))
        return len(batch)

    def close(self) -> None:
        self.c.close()


class StallMeter:
    """How long a read_committed reader of `topic` stands still behind records already written: per
    partition, how long its last stable offset stays below the high watermark without moving (an open
    transaction holds it there). Polled every `every` seconds on a thread of its own."""

    def __init__(self, bootstrap: str, topic: str, every: float = 0.2) -> None:
        self.topic, self.every = topic, every
        group = f"stall-{topic}-{time.time_ns()}"
        self.stable = Consumer({"bootstrap.servers": bootstrap, "group.id": group})  # read_committed
        self.written = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_uncommitted"}
        )
        self.partitions = sorted(self.stable.list_topics(topic, timeout=10).topics[topic].partitions)
        self.stalls: list[tuple[int, float, float]] = []  # (partition, since, until): ended ones
        self.open: dict[int, tuple[int, float, float]] = {}  # partition -> (stable offset, since, until)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"stall-{topic}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(self.every):
            for p in self.partitions:
                tp = TopicPartition(self.topic, p)
                try:
                    stable = self.stable.get_watermark_offsets(tp, timeout=5, cached=False)[1]
                    written = self.written.get_watermark_offsets(tp, timeout=5, cached=False)[1]
                except KafkaException:
                    continue  # a broker away: asked again at the next round
                now = time.monotonic()
                held = self.open.pop(p, None)
                if held is not None and held[0] == stable and stable < written:
                    self.open[p] = (stable, held[1], now)  # still held at the same stable offset
                    continue
                if held is not None:
                    self.stalls.append((p, held[1], held[2]))
                if stable < written:
                    self.open[p] = (stable, now, now)

    def longest_since(self, moment: float) -> tuple[float, int]:
        """The longest stall (seconds, partition) still going on at or after `moment` (monotonic)."""
        spans = self.stalls + [(p, since, until) for p, (_, since, until) in self.open.items()]
        return max(((until - since, p) for p, since, until in spans if until >= moment), default=(0.0, -1))

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(10)
        self.stable.close()
        self.written.close()
