"""SIGTERM stops every service within `--stop-timeout`, whatever it is doing.

A worker whose agent is stuck (blocking the event loop, or never returning while faust waits for it),
a source whose flush never ends and a sink whose event loop is blocked all leave within the bound,
with `STOP_TIMEOUT` and nothing more committed. A service that is not stuck still stops cleanly
with exit 0 after its flush, as before.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from olstream.shared.errors import ExitCode
from tests.support.sink_events import make_events, produce
from tests.support.sink_harness import start_sink
from tests.support.source_support import write_log
from tests.support.stop_support import (
    STUCK_MARK,
    committed_offsets,
    end_offsets,
    stuck_command,
    wait_exit,
    wait_for_text,
)
from tests.support.stream_support import (
    OLSTREAM,
    env,
    produce_rows,
    simulated_rows,
    start_worker,
    stop,
    worker_cmd,
)

pytestmark = pytest.mark.integration

STOP_TIMEOUT = 5.0
# the deadline, plus at most LOG_GRACE for the critical line, plus the process's exit
BOUND = STOP_TIMEOUT + 2.5
STUCK_PARTITION, STUCK_OFFSET = 0, 20


def start(cmd: list[str], log: Path, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env(), cwd=cwd)


def sigterm_and_wait(
    proc: subprocess.Popen[bytes], log: Path, *, again_after: float | None = None
) -> tuple[int, float]:
    """SIGTERM (and a second one `again_after` s later); the exit code and the seconds it took."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    if again_after is not None:
        try:
            proc.wait(again_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
    rc = wait_exit(proc, STOP_TIMEOUT + 25, log)
    return rc, time.monotonic() - started


def assert_left_at_deadline(rc: int, took: float, log: Path) -> None:
    text = log.read_text(errors="replace")
    assert rc == ExitCode.STOP_TIMEOUT, f"exited {rc}; log:\n{text[-4000:]}"
    assert STOP_TIMEOUT - 0.5 <= took <= BOUND, f"left {took:.1f} s after SIGTERM"
    assert "(--stop-timeout): leaving at once with exit code 124 (STOP_TIMEOUT)" in text, text[-4000:]


def wait_until(what: str, check, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"no {what} within {timeout:g} s")


# ---------------------------------------------------------------------------- worker


@pytest.mark.parametrize("kind", ["worker-block", "worker-await"])
def test_stuck_worker_leaves_within_stop_timeout_without_committing_the_stuck_record(
    kind: str, kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    rows, _ = simulated_rows(tmp_path, runs=100, seed=41)
    src, out, err = make_topic(2), make_topic(2), make_topic(1)
    produce_rows(kafka_bootstrap, src, rows)
    assert end_offsets(kafka_bootstrap, src)[STUCK_PARTITION] > STUCK_OFFSET + 1
    olstream_args = worker_cmd(
        kafka_bootstrap, unique_group, tmp_path / "data", src, out, err, "--stop-timeout", str(STOP_TIMEOUT)
    )[len(OLSTREAM) :]
    log = tmp_path / "worker.log"
    proc = start(
        stuck_command(kind, str(STUCK_PARTITION), str(STUCK_OFFSET), olstream_args=olstream_args), log
    )
    try:
        wait_for_text(log, STUCK_MARK, proc, 90)
        if kind == "worker-await":
            # the loop runs on: the records before the stuck one are flushed and committed
            wait_until(
                "commit up to the stuck record",
                lambda: (
                    committed_offsets(kafka_bootstrap, unique_group, src)[STUCK_PARTITION] == STUCK_OFFSET
                ),
                20,
            )
        else:
            time.sleep(2.0)
        # a second SIGTERM 3 s later neither re-arms nor extends the deadline
        rc, took = sigterm_and_wait(proc, log, again_after=3.0)
    finally:
        stop(proc, signal.SIGKILL)
    assert_left_at_deadline(rc, took, log)
    committed = committed_offsets(kafka_bootstrap, unique_group, src)[STUCK_PARTITION]
    assert committed <= STUCK_OFFSET, f"the stuck record's offset was committed ({committed})"


def test_worker_sigterm_still_stops_cleanly_with_exit_0(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    rows, _ = simulated_rows(tmp_path, runs=100, seed=42)
    src, out, err = make_topic(2), make_topic(2), make_topic(1)
    produce_rows(kafka_bootstrap, src, rows)
    log = tmp_path / "worker.log"
    proc = start_worker(worker_cmd(kafka_bootstrap, unique_group, tmp_path / "data", src, out, err), log)
    try:
        ends = end_offsets(kafka_bootstrap, src)
        wait_until(
            "commit of the whole input",
            lambda: committed_offsets(kafka_bootstrap, unique_group, src) == ends,
            90,
        )
        rc, took = sigterm_and_wait(proc, log)
    finally:
        stop(proc, signal.SIGKILL)
    assert rc == 0, log.read_text(errors="replace")[-4000:]
    assert took < 30.0
    text = log.read_text(errors="replace")
    assert "a stop signal leaves after 30.0 s at most" in text, (
        "the deadline is chained onto faust's handlers"
    )
    assert "leaving at once" not in text


# ---------------------------------------------------------------------------- source


def source_args(bootstrap: str, log_url: str, topic: str) -> list[str]:
    return ["source", "--log", log_url, "--bootstrap", bootstrap, "--topic", topic, "--partitions", "2"]


def test_stuck_source_leaves_within_stop_timeout(
    kafka_bootstrap: str, unique_topic: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    write_log(url, 200, partitions=2)
    log = tmp_path / "source.log"
    args = [*source_args(kafka_bootstrap, url, unique_topic), "--stop-timeout", str(STOP_TIMEOUT)]
    proc = start(stuck_command("source-flush", olstream_args=args), log)
    try:
        wait_for_text(log, "resuming after", proc, 60)
        time.sleep(1.0)
        rc, took = sigterm_and_wait(proc, log)
    finally:
        stop(proc, signal.SIGKILL)
    assert STUCK_MARK in log.read_text(errors="replace")
    assert_left_at_deadline(rc, took, log)


def test_source_sigterm_still_exits_0_after_its_flush(
    kafka_bootstrap: str, unique_topic: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    written = write_log(url, 200, partitions=2)
    log = tmp_path / "source.log"
    proc = start([*OLSTREAM, *source_args(kafka_bootstrap, url, unique_topic)], log)
    try:
        wait_for_text(log, "resuming after", proc, 60)
        wait_until(
            "every record published", lambda: sum(end_offsets(kafka_bootstrap, unique_topic)) >= written, 60
        )
        rc, took = sigterm_and_wait(proc, log)
    finally:
        stop(proc, signal.SIGKILL)
    assert rc == 0, log.read_text(errors="replace")[-4000:]
    assert took < STOP_TIMEOUT
    assert sum(end_offsets(kafka_bootstrap, unique_topic)) == written


# ---------------------------------------------------------------------------- sink


def sink_args(bootstrap: str, topic: str, group: str, out: Path) -> list[str]:
    return [
        *("sink", "--bootstrap", bootstrap, "--topic", topic, "--group", group),
        *("--file", str(out), "--dlq-topic", f"{topic}.dlq"),
    ]


def test_stuck_sink_leaves_within_stop_timeout_without_committing(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(2)
    produce(kafka_bootstrap, topic, make_events(20))
    log = tmp_path / "sink.log"
    args = [*sink_args(kafka_bootstrap, topic, unique_group, tmp_path / "out.ndjson"), "--stop-timeout", "5"]
    proc = start(stuck_command("sink-admit", olstream_args=args), log, cwd=tmp_path)
    try:
        wait_for_text(log, STUCK_MARK, proc, 60)
        rc, took = sigterm_and_wait(proc, log)
    finally:
        stop(proc, signal.SIGKILL)
    assert_left_at_deadline(rc, took, log)
    assert all(offset < 0 for offset in committed_offsets(kafka_bootstrap, unique_group, topic))


def test_sink_sigterm_still_exits_0_after_its_flush(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(2)
    events = make_events(20)
    produce(kafka_bootstrap, topic, events)
    out, log = tmp_path / "out.ndjson", tmp_path / "sink.log"
    proc = start_sink(
        kafka_bootstrap, topic, unique_group, "--file", str(out), "--dlq-topic", f"{topic}.dlq", log_path=log
    )
    try:
        ends = end_offsets(kafka_bootstrap, topic)
        wait_until(
            "every event written and committed",
            lambda: committed_offsets(kafka_bootstrap, unique_group, topic) == ends,
            60,
        )
        rc, took = sigterm_and_wait(proc, log)
    finally:
        stop(proc, signal.SIGKILL)
    assert rc == 0, log.read_text(errors="replace")[-4000:]
    assert took < STOP_TIMEOUT
    assert len(out.read_text().splitlines()) == len(events)
