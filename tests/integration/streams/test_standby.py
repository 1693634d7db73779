"""Standby copies of the run states (`--standby-states on`): a replica takes a killed worker's
partitions over within seconds of its session timeout, restoring only the changelog's tail."""

from __future__ import annotations

import re
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest

from olstream.connectors.source.resume import placement_of
from olstream.contract.records import RunEnded, RunStarted
from olstream.devkit.process import free_port
from tests.support.stop_support import committed_everything
from tests.support.stream_records import T0, ended, started
from tests.support.stream_support import (
    Follower,
    consume_all,
    metric,
    produce_records,
    repeats,
    start_worker,
    stop,
    tail,
    wait_for,
    worker_cmd,
)

pytestmark = pytest.mark.integration

LOG_PARTITIONS = 6
RUNS_PER_PARTITION = 3000  # the history: 18,000 open runs, a changelog write each
SESSION_TIMEOUT = 6.0
TAKEOVER_BOUND = SESSION_TIMEOUT + 10.0  # from the kill to the first event of a taken partition
ASSIGNED = re.compile(r"rebalance complete: input partitions \[([\d, ]*)\]")
RESTORED = re.compile(
    r"run states of input partitions \[([\d, ]*)\] restored from \S+: (\d+) changelog writes"
)


def assigned(log: Path) -> list[int] | None:
    """The input partitions a worker's last completed rebalance gave it."""
    found = ASSIGNED.findall(log.read_text(errors="replace"))
    return [int(p) for p in found[-1].split(",") if p.strip()] if found else None


def test_a_replica_with_standby_copies_takes_a_killed_workers_partitions_within_seconds(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    src, out, err = make_topic(6), make_topic(6), make_topic(1)
    offsets = dict.fromkeys(range(LOG_PARTITIONS), 0)

    def next_offset(lp: int) -> int:
        offsets[lp] += 1
        return offsets[lp] - 1

    history: list[RunStarted] = [
        started(
            f"run-{lp}-{i}",
            partition=lp,
            offset=next_offset(lp),
            instance=f"inst-{lp}-{i}",
            start=T0 + timedelta(milliseconds=i),
        )
        for i in range(RUNS_PER_PARTITION)
        for lp in range(LOG_PARTITIONS)
    ]
    produce_records(kafka_bootstrap, src, history)
    placement = placement_of(kafka_bootstrap, src)
    input_partition = {lp: placement.kafka_partition(lp) for lp in range(LOG_PARTITIONS)}

    ports = [free_port(), free_port()]
    logs = [tmp_path / "w0.log", tmp_path / "w1.log"]
    procs = []
    for i in (0, 1):
        cmd = worker_cmd(
            kafka_bootstrap, unique_group, tmp_path / f"w{i}", src, out, err,
            "--session-timeout", str(SESSION_TIMEOUT), "--standby-states", "on",
            "--metrics-port", str(ports[i]),
        )  # fmt: skip
        procs.append(start_worker(cmd, logs[i]))
    follower = Follower(kafka_bootstrap, out)
    try:

        def split() -> bool:
            a, b = assigned(logs[0]), assigned(logs[1])
            return bool(a) and bool(b) and sorted(a + b) == list(range(6))  # type: ignore[operator]

        wait_for("both workers own input partitions", split, 60, *logs, every=0.5)
        wait_for(
            "the history processed",
            lambda: committed_everything(kafka_bootstrap, unique_group, src),
            120,
            *logs,
            every=0.5,
        )
        survivor, victim = 0, 1
        taken = assigned(logs[victim])
        assert taken and assigned(logs[survivor]) and split()

        def warm() -> bool:
            return (
                metric(ports[survivor], "olstream_stream_standby_partitions") == len(taken)
                and metric(ports[survivor], "olstream_stream_standby_lag") == 0
            )

        wait_for("the survivor's copies of the victim's partitions caught up", warm, 60, *logs, every=0.5)
        while follower.poll(1.0):
            pass
        assert len(follower.seen) >= len(history)  # the STARTs (the follower reads from the start)
        scanned = len(follower.seen)

        # runs end while the victim processes them: the kill lands mid-stream
        first = [
            ended(r.engine_run_id, partition=r.partition, offset=next_offset(r.partition))
            for r in history[:1200]
        ]
        produce_records(kafka_bootstrap, src, first)
        time.sleep(0.3)
        survivor_log_at = logs[survivor].stat().st_size
        killed = time.monotonic()
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait()
        # more end after the kill: their events say when the taken partitions process again
        second = [
            ended(r.engine_run_id, partition=r.partition, offset=next_offset(r.partition))
            for r in history[1200:2400]
        ]
        produce_records(kafka_bootstrap, src, second)
        late = {r.engine_run_id for r in second if input_partition[r.partition] in taken}
        assert late

        first_taken: float | None = None
        want = {r.engine_run_id for r in first + second}
        done: set[str] = set()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and done != want:
            follower.poll(0.2)
            for o in follower.seen[scanned:]:
                doc = o.doc
                if doc["eventType"] == "COMPLETE":
                    rid = doc["run"]["facets"]["workflow"]["engineRunId"]
                    done.add(rid)
                    if first_taken is None and rid in late:
                        first_taken = time.monotonic() - killed
            scanned = len(follower.seen)
        assert first_taken is not None, tail(logs[survivor], 40)
        assert first_taken <= TAKEOVER_BOUND, (
            f"the taken partitions processed again {first_taken:.1f} s after the kill (bound "
            f"{TAKEOVER_BOUND:.0f} s)\n{tail(logs[survivor], 40)}"
        )
        missing = want - done
        assert not missing, f"{len(missing)} runs lack their COMPLETE, e.g. {sorted(missing)[:3]}"
    finally:
        for p in procs:
            stop(p)
        follower.close()

    since_kill = logs[survivor].read_text(errors="replace")[survivor_log_at:]
    handed = re.search(
        r"standby: run states of input partitions \[([\d, ]*)\] handed to the worker", since_kill
    )
    assert handed is not None, since_kill[-3000:]
    assert sorted(int(p) for p in handed.group(1).split(",")) == sorted(taken)
    # the restores after the kill (a partition already at its changelog's end is not logged): a tail
    # only, where a restore without the copies applies every history write of those partitions
    restored = sum(
        int(n) for ps, n in RESTORED.findall(since_kill) if {int(p) for p in ps.split(",")} & set(taken)
    )
    history_writes = RUNS_PER_PARTITION * len(taken)
    assert restored <= len(first) < history_writes / 5, (restored, history_writes)
    print(f"\ntakeover {first_taken:.1f} s after the kill; the survivor restored {restored} changelog writes")

    events = follower.seen
    assert repeats(o.value for o in events) == 0, "exactly_once: an event repeated after the kill"
    assert sum(1 for o in events if o.doc["eventType"] == "COMPLETE") == len(want)
    assert consume_all(kafka_bootstrap, err, idle=0.5) == []  # no unknown_run: no state was lost
    assert not [r for r in first + second if not isinstance(r, RunEnded)]
