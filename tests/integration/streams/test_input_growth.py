"""An input topic that gains partitions while the worker runs (MirrorMaker 2 growing a copy, an
operator adding partitions): the worker leaves with one clear line and exit 76 (INPUT_GREW), never a
crash; its restart grows the state changelog to match, and every run arrives. Replicas restarted
together after it (as a supervisor restarts them) all race to grow the changelog, and all run."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]

from olstream.contract import codec
from olstream.contract.records import Record
from olstream.shared.errors import ExitCode
from olstream.streams.runtime.topology import changelog_topic
from tests.support.stop_support import committed_offsets, end_offsets
from tests.support.stream_records import ended, started
from tests.support.stream_support import (
    consume_all,
    headers_for,
    run_until_idle,
    start_worker,
    stop,
    tail,
    worker_cmd,
)

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, topic: str, records: list[Record]) -> None:
    """Each record to the Kafka partition of its log partition's number, as MirrorMaker 2 keeps it."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for r in records:
        payload = codec.encode(r)
        producer.produce(
            topic, payload, str(r.partition).encode(), partition=r.partition,
            headers=headers_for(r.partition, r.offset, payload),
        )  # fmt: skip
    assert producer.flush(30) == 0


def _run(rid: str, partition: int) -> list[Record]:
    return [
        started(rid, partition=partition, offset=0, instance=rid),
        ended(rid, partition=partition, offset=1),
    ]


def _engine_ids(bootstrap: str, topic: str, expect: int) -> set[str]:
    events = consume_all(bootstrap, topic, expect=expect, idle=1.0, timeout=90)
    return {o.doc["run"]["facets"]["workflow"]["engineRunId"] for o in events}


def test_an_input_that_grows_stops_the_worker_clearly_and_a_restart_goes_on(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    src, out, err = make_topic(3), make_topic(3), make_topic(1)
    _produce(kafka_bootstrap, src, [r for p in range(3) for r in _run(f"before-{p}", p)])
    cmd = worker_cmd(kafka_bootstrap, unique_group, tmp_path / "w", src, out, err, "--metadata-refresh", "1")
    proc = start_worker(cmd, tmp_path / "w1.log")
    try:
        assert _engine_ids(kafka_bootstrap, out, 6) == {f"before-{p}" for p in range(3)}, tail(
            tmp_path / "w1.log"
        )
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.create_partitions([NewPartitions(src, 6)])[src].result(timeout=30)
        _produce(kafka_bootstrap, src, _run("grown-5", 5))
        rc = proc.wait(90)
    finally:
        stop(proc)
    log = (tmp_path / "w1.log").read_text(errors="replace")
    assert rc == ExitCode.INPUT_GREW, f"exit {rc}:\n{tail(tmp_path / 'w1.log')}"
    assert "Traceback" not in log
    line = next(line for line in log.splitlines() if "grew from 3 partitions" in line)
    assert src in line and "restart" in line

    # the restart grows the changelog and processes the new partition's run
    run_until_idle(cmd, tmp_path / "w2.log", timeout=180)
    meta = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
    assert len(meta.topics[changelog_topic(unique_group)].partitions) == 6
    assert "growing the changelog" in (tmp_path / "w2.log").read_text(errors="replace")
    assert _engine_ids(kafka_bootstrap, out, 8) == {f"before-{p}" for p in range(3)} | {"grown-5"}
    assert consume_all(kafka_bootstrap, err, idle=0.5) == []


def test_replicas_restarted_together_after_the_input_grew_all_run_and_consume_it_all(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    src, out, err = make_topic(3), make_topic(3), make_topic(1)
    # runs that end before the growth, and runs open across it (their state must survive the restart)
    opened = [started(f"open-{p}", partition=p, offset=2, instance=f"open-{p}") for p in range(3)]
    _produce(kafka_bootstrap, src, [r for p in range(3) for r in _run(f"before-{p}", p)] + opened)
    run_until_idle(
        worker_cmd(kafka_bootstrap, unique_group, tmp_path / "w0", src, out, err), tmp_path / "w0.log"
    )
    changelog = changelog_topic(unique_group)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert len(admin.list_topics(changelog, timeout=10).topics[changelog].partitions) == 3

    admin.create_partitions([NewPartitions(src, 6)])[src].result(timeout=30)
    grown = [ended(f"open-{p}", partition=p, offset=3) for p in range(3)]
    _produce(kafka_bootstrap, src, grown + [r for p in range(3, 6) for r in _run(f"grown-{p}", p)])

    # three replicas restarted together, as a supervisor restarts them after their exit 76; each
    # waits for the others before it reads the changelog's count, so all three find 3 and grow it
    logs = [tmp_path / f"replica-{i}.log" for i in range(3)]
    together = [sys.executable, "-m", "tests.support.together_worker", str(tmp_path / "together"), "3"]
    cmds = [worker_cmd(kafka_bootstrap, unique_group, tmp_path / f"w{i}", src, out, err) for i in range(3)]
    procs = [start_worker([*together, *cmd[3:]], log) for cmd, log in zip(cmds, logs, strict=True)]
    try:
        deadline = time.monotonic() + 90
        while committed_offsets(kafka_bootstrap, unique_group, src) != end_offsets(kafka_bootstrap, src):
            for i, proc in enumerate(procs):
                assert proc.poll() is None, f"replica {i} exited {proc.returncode}:\n{tail(logs[i])}"
            assert time.monotonic() < deadline, "lag not 0 in 90 s:\n" + "\n".join(tail(log) for log in logs)
            time.sleep(0.5)
        running = [proc.poll() is None for proc in procs]
    finally:
        for proc in procs:
            stop(proc)
    assert running == [True] * 3, [proc.returncode for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 3, "\n".join(tail(log) for log in logs)
    text = "".join(log.read_text(errors="replace") for log in logs)
    assert "Traceback" not in text and "cannot grow" not in text
    assert text.count("growing the changelog") == 3  # all three raced to grow it
    assert len(admin.list_topics(changelog, timeout=10).topics[changelog].partitions) == 6
    runs = (
        {f"before-{p}" for p in range(3)}
        | {f"open-{p}" for p in range(3)}
        | {f"grown-{p}" for p in range(3, 6)}
    )
    assert _engine_ids(kafka_bootstrap, out, 2 * len(runs)) == runs
    assert consume_all(kafka_bootstrap, err, idle=0.5) == []  # no unknown_run: the open runs kept their state
