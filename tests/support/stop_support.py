"""Helpers of the stop tests: services stuck on purpose, offsets from the broker, bounded waits.

The stuck services are real `olstream` processes started through this module, which first
monkeypatches one function of the service to block forever, then runs the command's own main
(no test hook in the product):

    python -m tests.support.stop_support worker-block P O -- worker --bootstrap ...
    python -m tests.support.stop_support worker-await P O -- worker ...
    python -m tests.support.stop_support source-flush -- source --log ...
    python -m tests.support.stop_support sink-admit -- sink --bootstrap ...

- `worker-block`: `ApplyRecord.change_state` blocks the event loop (a synchronous call that never returns)
  on the record at input partition P, offset O;
- `worker-await`: the agent awaits `InputOrder.admit` for that record (`admit_at_once` sends it
  there), which never returns, while the event loop runs on (an agent that never returns, even when
  cancelled: faust's stop waits for it);
- `source-flush`: the source's flush to Kafka never returns (the flush of a stop);
- `sink-admit`: the sink blocks its event loop on the first event it consumes.

Each prints `STUCK_MARK` (and where) on stderr once it is stuck.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tests.support.stream_support import tail

STUCK_MARK = "STUCK-FOR-TEST"
STUCK_KINDS = ("worker-block", "worker-await", "source-flush", "sink-admit")


def stuck_command(kind: str, *args: str, olstream_args: Sequence[str]) -> list[str]:
    """The command line of an `olstream` process stuck as `kind` (see the module docstring)."""
    assert kind in STUCK_KINDS, kind
    return [sys.executable, "-m", "tests.support.stop_support", kind, *args, "--", *olstream_args]


# ---------------------------------------------------------------------------- the broker's offsets


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    return sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)


def end_offsets(bootstrap: str, topic: str) -> list[int]:
    """The high watermark of each partition of `topic`, by partition."""
    c = _consumer(bootstrap, f"stop-support-{time.time_ns()}")
    try:
        return [
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in _partitions(c, topic)
        ]
    finally:
        c.close()


def committed_offsets(bootstrap: str, group: str, topic: str) -> list[int]:
    """The group's committed offset of each partition of `topic` (-1001: none), by partition: the
    tests' one reader of committed offsets (a worker's, a sink's).

    Offsets a worker sends inside a transaction count once the transaction commits. The reader is
    read_uncommitted on purpose: librdkafka's `committed()` in read_committed asks for stable
    offsets, and the broker answers UNSTABLE_OFFSET_COMMIT while a transaction holding the group's
    offsets is open; a worker killed mid-transaction leaves it open until it times out or a new
    producer fences it, so the read would time out instead of answering (CI of stop 47).
    """
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        tps = c.committed([TopicPartition(topic, p) for p in _partitions(c, topic)], timeout=10)
        return [tp.offset for tp in sorted(tps, key=lambda tp: tp.partition)]
    finally:
        c.close()


def committed_everything(bootstrap: str, group: str, topic: str) -> bool:
    """Whether the group committed each non-empty partition of `topic` to its end."""
    ends = end_offsets(bootstrap, topic)
    done = committed_offsets(bootstrap, group, topic)
    return all(end == 0 or offset >= end for end, offset in zip(ends, done, strict=True))


# ---------------------------------------------------------------------------- processes


def wait_exit(proc: subprocess.Popen[bytes], timeout: float, log: Path) -> int:
    """The process's exit code; killed, and an AssertionError with its log, when it runs longer."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"still running after {timeout:g} s; log:\n{tail(log, 60)}") from None


def wait_for_text(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Until `text` is in the log (an AssertionError when the process ends or the time is up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before {text!r}; log:\n{tail(log, 60)}")
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} within {timeout:g} s; log:\n{tail(log, 60)}")


# ---------------------------------------------------------------------------- stuck on purpose


def _mark(where: str) -> None:
    sys.stderr.write(f"{STUCK_MARK} {where}\n")
    sys.stderr.flush()


def _block_forever() -> None:
    while True:  # time.sleep returns after a signal handler ran: sleep again
        time.sleep(3600)


async def _await_forever() -> None:
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue  # an agent that does not give up, even when faust cancels it


def _stick_worker(kind: str, partition: int, offset: int) -> None:
    from olstream.streams.runtime.apply_record import ApplyRecord
    from olstream.streams.runtime.chain import Taken

    def chosen(event: Any) -> bool:
        return bool(event.message.partition == partition and event.message.offset == offset)

    if kind == "worker-block":
        change_state = ApplyRecord.change_state

        def blocking_change_state(self: ApplyRecord, item: Taken) -> bool:
            if chosen(item.input.event):
                _mark(f"in ApplyRecord.change_state at partition {partition} offset {offset}")
                _block_forever()
            return change_state(self, item)

        ApplyRecord.change_state = blocking_change_state  # type: ignore[method-assign]
    else:
        from olstream.streams.runtime.input_order import NOT_ASSIGNED, InputOrder

        admit, admit_at_once = InputOrder.admit, InputOrder.admit_at_once

        def ask_admit(self: InputOrder, at_partition: int, at_offset: int) -> int | None:
            if (at_partition, at_offset) == (partition, offset):
                return NOT_ASSIGNED  # the agent awaits `admit` for this record
            return admit_at_once(self, at_partition, at_offset)

        async def never_admit(self: InputOrder, at_partition: int, at_offset: int) -> bool:
            if (at_partition, at_offset) == (partition, offset):
                _mark(f"in InputOrder.admit at partition {partition} offset {offset}")
                await _await_forever()
            return await admit(self, at_partition, at_offset)

        InputOrder.admit = never_admit  # type: ignore[method-assign]
        InputOrder.admit_at_once = ask_admit  # type: ignore[method-assign,assignment]


def _stick_source() -> None:
    from olstream.connectors.source.publisher import Publisher

    def never_flush(self: Publisher, timeout: float | None = None) -> int:
        _mark("in Publisher.flush")
        _block_forever()
        return 0

    Publisher.flush = never_flush  # type: ignore[method-assign]


def _stick_sink() -> None:
    from olstream.connectors.sink.sink import Sink

    def never_admit(self: Sink, message: Any) -> None:
        _mark(f"in Sink._admit at partition {message.partition()} offset {message.offset()}")
        _block_forever()

    Sink._admit = never_admit  # type: ignore[method-assign]


def main(argv: Sequence[str]) -> int:
    split = list(argv).index("--")
    kind, *params = argv[:split]
    if kind.startswith("worker-"):
        _stick_worker(kind, int(params[0]), int(params[1]))
    elif kind == "source-flush":
        _stick_source()
    elif kind == "sink-admit":
        _stick_sink()
    else:
        raise SystemExit(f"unknown kind {kind!r}: one of {', '.join(STUCK_KINDS)}")
    from olstream.cli.main import main as olstream_main

    return olstream_main(list(argv[split + 1 :]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
