"""Output never depends on partition assignment: an engine run id reused on two log partitions is two
runs, whether one worker owns both input partitions or two workers own one each."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from olstream.contract import codec
from olstream.contract.records import Record, RunStatus
from tests.support.stream_records import declared, ended, started
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


def reused_id_records() -> list[Record]:
    out: list[Record] = []
    for p in (0, 1):
        for i in range(5):
            rid = "shared" if i == 0 else f"own-{p}-{i}"  # "shared" on both log partitions
            out += [
                started(rid, partition=p, offset=3 * i, instance=f"i-{p}-{i}"),
                declared(rid, partition=p, offset=3 * i + 1, name=f"db.p{p}.t{i}"),
                ended(
                    rid, partition=p, offset=3 * i + 2, status=RunStatus.FAILED if p else RunStatus.COMPLETED
                ),
            ]
    return out


def produce_by_log_partition(bootstrap: str, topic: str, records: list[Record]) -> None:
    """Log partition p to input partition p, so that each of two workers gets one log partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for r in records:
        payload = codec.encode(r)
        producer.produce(
            topic, payload, str(r.partition).encode(), partition=r.partition,
            headers=headers_for(r.partition, r.offset, payload),
        )  # fmt: skip
    assert producer.flush(30) == 0


def owned_partitions(log: Path) -> list[int] | None:
    found = re.findall(
        r"rebalance complete: input partitions \[([0-9, ]*)\]", log.read_text(errors="replace")
    )
    return [int(x) for x in found[-1].split(",") if x.strip()] if found else None


def test_a_reused_engine_run_id_gives_the_same_events_under_either_assignment(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    records = reused_id_records()
    expected = 2 * len(records) // 3  # a START and a terminal event per run: 10 runs

    # one worker owns both input partitions
    src1, out1, err1 = make_topic(2), make_topic(2), make_topic(1)
    produce_by_log_partition(kafka_bootstrap, src1, records)
    run_until_idle(
        worker_cmd(kafka_bootstrap, f"{unique_group}-one", tmp_path / "one", src1, out1, err1),
        tmp_path / "one.log",
    )
    together = consume_all(kafka_bootstrap, out1, expect=expected, idle=1.0)

    # two workers, one input partition each, both joined before any record exists
    src2, out2, err2 = make_topic(2), make_topic(2), make_topic(1)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [
        start_worker(worker_cmd(kafka_bootstrap, f"{unique_group}-two", tmp_path / n, src2, out2, err2), log)
        for n, log in zip(("a", "b"), logs, strict=True)
    ]
    try:
        deadline = time.monotonic() + 120
        while sorted(tuple(owned_partitions(log) or ()) for log in logs) != [(0,), (1,)]:
            assert time.monotonic() < deadline, "\n".join(tail(log) for log in logs)
            assert all(p.poll() is None for p in procs), "\n".join(tail(log) for log in logs)
            time.sleep(0.2)
        produce_by_log_partition(kafka_bootstrap, src2, records)
        apart = consume_all(kafka_bootstrap, out2, expect=expected, idle=2.0)
    finally:
        for p in procs:
            stop(p)

    assert len(together) == expected, [o.doc["eventType"] for o in together]
    # the same events, byte for byte; two workers may repeat some around a rebalance (at least once)
    distinct_apart = {o.value for o in apart}
    assert {o.value for o in together} == distinct_apart and len(distinct_apart) == expected
    shared = [o.doc for o in together if o.doc["run"]["facets"]["workflow"]["engineRunId"] == "shared"]
    assert sorted(d["eventType"] for d in shared) == ["COMPLETE", "FAIL", "START", "START"]
    assert len({d["run"]["runId"] for d in shared}) == 2
    assert consume_all(kafka_bootstrap, err1, idle=0.5) == []
    assert consume_all(kafka_bootstrap, err2, idle=0.5) == []
