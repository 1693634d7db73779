"""The pure half of `olstream errors redrive`: what is sent where, in which order, and what is left."""

from __future__ import annotations

import json

from olstream.contract import wire
from olstream.operations.error_records import ErrorRecord
from olstream.operations.redrive import Kind, add_terminals, kind_of, plan
from olstream.shared import deadletter

LINEAGE = "openlineage.events"


def event(run: str, kind: str) -> bytes:
    return json.dumps({"eventType": kind, "run": {"runId": run}}).encode()


def dlq(offset: int, run: str, kind: str, origin: int, partition: int = 0, **extra: bytes) -> ErrorRecord:
    headers = (
        (deadletter.ERROR, b"rejected"),
        (deadletter.HTTP_STATUS, b"400"),
        (deadletter.SOURCE_TOPIC, LINEAGE.encode()),
        (deadletter.SOURCE_PARTITION, str(partition).encode()),
        (deadletter.SOURCE_OFFSET, str(origin).encode()),
        *extra.items(),
    )
    return ErrorRecord("dlq", 0, offset, 1_000, event(run, kind), headers, f"run:{run}".encode())


def worker_error(offset: int, origin: int, log_offset: int, **extra: bytes) -> ErrorRecord:
    headers = (
        (deadletter.ERROR, b"unknown_run"),
        (deadletter.ERROR_DETAIL, b"run r1 is unknown"),
        (deadletter.SOURCE_TOPIC, b"olstream.eventlog"),
        (deadletter.SOURCE_PARTITION, b"2"),
        (deadletter.SOURCE_OFFSET, str(origin).encode()),
        (wire.HEADER_PARTITION, b"5"),
        (wire.HEADER_OFFSET, str(log_offset).encode()),
        *extra.items(),
    )
    return ErrorRecord("errors", 0, offset, 1_000, b"avro", headers, b"5")


def lineage(offset: int, run: str, kind: str, partition: int = 0) -> ErrorRecord:
    headers = ((wire.HEADER_RUN_ID, run.encode()), (wire.HEADER_EVENT_TYPE, kind.encode()))
    return ErrorRecord(LINEAGE, partition, offset, 1_000, event(run, kind), headers, f"run:{run}".encode())


def header(headers: tuple[tuple[str, bytes], ...], name: str) -> bytes | None:
    return dict(headers).get(name)


def test_kinds_are_told_apart_by_their_headers() -> None:
    assert kind_of(dlq(0, "a", "START", 0)) is Kind.SINK
    assert kind_of(worker_error(0, 0, 0)) is Kind.WORKER
    assert kind_of(ErrorRecord("src", 0, 0, 0, b"row", ((deadletter.ERROR, b"undecodable"),))) is Kind.SOURCE


def test_dlq_events_go_back_to_their_partition_in_their_order_marked_as_re_driven() -> None:
    p = plan([dlq(1, "a", "COMPLETE", 9), dlq(0, "a", "START", 4), dlq(2, "b", "FAIL", 3, partition=1)], 3)
    assert [(s.topic, s.partition, s.value) for s in p.sends] == [
        (LINEAGE, 0, event("a", "START")),
        (LINEAGE, 0, event("a", "COMPLETE")),
        (LINEAGE, 1, event("b", "FAIL")),
    ]
    assert [s.key for s in p.sends] == [b"run:a", b"run:a", b"run:b"]
    assert [header(s.headers, deadletter.REDRIVE_ATTEMPT) for s in p.sends] == [b"1", b"1", b"1"]
    assert header(p.sends[0].headers, deadletter.REDRIVEN_FROM) == b"dlq[0]@0"
    assert p.terminals_wanted == [] and p.skipped == []
    assert [s.topic for s in plan([dlq(0, "a", "START", 4)], 3, to_topic="other").sends] == ["other"]


def test_a_run_whose_last_re_driven_event_is_not_terminal_gets_its_latest_terminal_event_again() -> None:
    p = plan([dlq(0, "a", "START", 4), dlq(1, "b", "COMPLETE", 6)], 3)
    assert [w.run_id for w in p.terminals_wanted] == ["a"]
    later = [
        lineage(3, "a", "COMPLETE"),  # before the re-driven START: not the one
        lineage(5, "a", "RUNNING"),
        lineage(7, "a", "COMPLETE"),
        lineage(8, "c", "COMPLETE"),
        lineage(9, "a", "COMPLETE", partition=1),  # another partition
    ]
    assert add_terminals(p, later) == 1
    last = p.sends[-1]
    assert (last.partition, last.value, last.terminal_repeat) == (0, event("a", "COMPLETE"), True)
    assert last.origin == f"{LINEAGE}[0]@7"
    assert header(last.headers, wire.HEADER_RUN_ID) == b"a"
    assert header(last.headers, deadletter.REDRIVE_ATTEMPT) == b"1"
    open_run = plan([dlq(0, "z", "RUNNING", 4)], 3)
    assert add_terminals(open_run, later) == 0 and len(open_run.sends) == 1  # still open: nothing added


def test_worker_records_keep_their_key_and_log_position_and_go_back_to_their_input_partition() -> None:
    p = plan([worker_error(1, 12, 8), worker_error(0, 10, 7)], 3)
    assert [(s.topic, s.partition, s.key) for s in p.sends] == [("olstream.eventlog", 2, b"5")] * 2
    assert [header(s.headers, wire.HEADER_OFFSET) for s in p.sends] == [b"7", b"8"]
    assert all(header(s.headers, wire.HEADER_PARTITION) == b"5" for s in p.sends)
    assert p.terminals_wanted == []


def test_cut_copies_too_large_source_rows_and_spent_attempts_are_left_with_why() -> None:
    cut = dlq(0, "a", "START", 1, **{deadletter.SIZE: b"999999"})
    too_large = ErrorRecord(
        "errors", 0, 1, 0, b"x", ((deadletter.ERROR, b"too_large"), (deadletter.SOURCE_TOPIC, b"t"))
    )
    row = ErrorRecord("src", 0, 2, 0, b"row", ((deadletter.ERROR, b"undecodable"),))
    spent = dlq(3, "b", "START", 2, **{deadletter.REDRIVE_ATTEMPT: b"3"})
    again = dlq(4, "c", "COMPLETE", 5, **{deadletter.REDRIVE_ATTEMPT: b"2"})
    p = plan([cut, too_large, row, spent, again], 3)
    assert [s.value for s in p.sends] == [again.value]
    assert header(p.sends[0].headers, deadletter.REDRIVE_ATTEMPT) == b"3"  # counts on
    why = dict(p.skipped_by_reason())
    assert why == {
        "copy cut to 64 KiB: re-read it from the event log at its position": 1,
        "too_large: re-read it from the event log at its position": 1,
        "source row: re-read from the event log (--log)": 1,
        "re-driven 3 times already (--max-attempts)": 1,
    }


def test_attempt_counts_read_safely() -> None:
    assert deadletter.redrive_attempt(None) == 0
    assert deadletter.redrive_attempt(b"2") == 2
    assert deadletter.redrive_attempt(b"x") == 0
