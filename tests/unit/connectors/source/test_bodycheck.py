"""The compiled body walker of `--check full` never changes a verdict: fastavro's stays the reference."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime

from olstream.connectors.source.avro_check import MAX_MICROS, compile_body_check
from olstream.connectors.source.rowcheck import RowChecker
from olstream.contract import codec
from olstream.contract.records import (
    DatasetDeclared,
    Direction,
    RunEnded,
    RunError,
    RunRef,
    RunStarted,
    RunStatus,
)
from olstream.eventlog.store import StoredRow

T = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def sample_rows() -> list[StoredRow]:
    parent = RunRef("p-1", "ns", "wf", "2", "inst-ü", T)
    records: list[RunStarted | DatasetDeclared | RunEnded] = [
        RunStarted(3, 17, T, "run-1", "tenant", "ns", "wf", "1", "inst", T),
        RunStarted(
            0, 300_000, T, "run-2", "t" * 200, "ns", "wf", "1", "ïnst", T,
            "me", T, T, parent, RunRef("r"), "old",
        ),
        DatasetDeclared(3, 18, T, "run-1", Direction.OUTPUT, "k", "s3://b", "päth/ü", T, "v1"),
        DatasetDeclared(70, 5, T, "run-1", Direction.INPUT, "", "", "", T),
        RunEnded(3, 19, T, "run-1", RunStatus.FAILED, T, RunError("boom", "E", "trace")),
        RunEnded(3, 20, T, "run-1", RunStatus.CANCELLED, T),
    ]
    rows = [StoredRow(r.partition, r.offset, codec.encode(r)) for r in records]
    v1 = next(ws for ws in codec.known_writer_schemas().values() if ws.source.startswith("history/"))
    old = codec.to_avro_dict(records[1])
    for name in ("root", "supersedes"):
        old.pop(name, None)
    rows.append(StoredRow(0, 300_000, codec.encode_with(v1, old)))
    far = dict(codec.to_avro_dict(records[0]), start_time=MAX_MICROS + 1)  # outside the datetime range
    rows.append(StoredRow(3, 17, codec.encode_with(codec.current_schemas()["RunStarted"], far)))
    return rows


def without_walker() -> RowChecker:
    checker = RowChecker()
    checker._schemas = {fp: dataclasses.replace(k, walk=None) for fp, k in checker._schemas.items()}
    return checker


def test_the_walker_reads_position_and_end_of_every_sample() -> None:
    for row in sample_rows()[:-1]:
        ws = codec.known_writer_schemas()[row.payload[2:10]]
        assert compile_body_check(ws.parsed)(row.payload, 10) == (row.partition, row.offset, len(row.payload))
    far = sample_rows()[-1]
    assert compile_body_check(codec.current_schemas()["RunStarted"].parsed)(far.payload, 10) is None


def test_verdicts_and_reasons_equal_fastavro_alone_on_mangled_rows() -> None:
    fast, reference = RowChecker(), without_walker()
    rnd = random.Random(3)
    rows = sample_rows()
    verdicts = {True: 0, False: 0}
    for _ in range(6000):
        good = rnd.choice(rows)
        data = bytearray(good.payload)
        how = rnd.randrange(5)
        if how == 0:
            data = data[: rnd.randrange(len(data))]
        elif how == 1:
            for _ in range(rnd.randrange(1, 4)):
                data[rnd.randrange(10, len(data))] = rnd.randrange(256)
        elif how == 2:
            data += bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 3)))
        elif how == 3:
            del data[rnd.randrange(10, len(data))]
        else:
            data.insert(rnd.randrange(10, len(data)), rnd.randrange(256))
        row = StoredRow(good.partition, good.offset, bytes(data))
        expected = reference.headers_for(row)
        assert fast.headers_for(row) == expected, bytes(data).hex()
        verdicts[isinstance(expected, str)] += 1
    assert verdicts[True] > 1000 and verdicts[False] > 100  # both kinds were exercised
    for row in rows:
        assert fast.headers_for(row) == reference.headers_for(row)
