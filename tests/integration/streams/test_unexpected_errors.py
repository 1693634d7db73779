"""An unexpected exception in the worker never loses a record: the process exits non-zero before the
record's offset can be committed (faust would restart the crashed agent and commit past it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from olstream.shared.errors import ExitCode
from tests.support.stop_support import committed_offsets
from tests.support.stream_records import ended, started
from tests.support.stream_support import (
    consume_all,
    produce_records,
    run_until_idle,
    start_worker,
    tail,
    worker_cmd,
)

pytestmark = pytest.mark.integration


def test_an_unexpected_exception_exits_non_zero_and_its_record_is_not_committed(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    src, out, err = make_topic(1), make_topic(1), make_topic(1)
    records = [
        started("r1", offset=0, instance="i1"),
        ended("r1", offset=1),
        started("r2", offset=2, instance="i2"),  # topic offset 2: the fault
        ended("r2", offset=3),
        started("r3", offset=4, instance="i3"),
        ended("r3", offset=5),
    ]
    produce_records(kafka_bootstrap, src, records)
    # batches of 1: the records before the fault are committed, so "not past it" is a real bound
    cmd = worker_cmd(kafka_bootstrap, unique_group, tmp_path / "w", src, out, err, "--batch-size", "1")
    faulty = [sys.executable, "-m", "tests.support.faulty_worker", "r2", *cmd[3:]]
    log = tmp_path / "faulty.log"
    proc = start_worker([*faulty, "--until-idle"], log)
    try:
        rc = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == ExitCode.FAILED, f"exit {rc}; log:\n{tail(log)}"
    text = log.read_text()
    assert "unexpected RuntimeError: injected fault on run r2" in text, tail(log)
    assert "topic partition 0, offset 2" in text and "Agent crashed" not in text, tail(log)
    assert committed_offsets(kafka_bootstrap, unique_group, src)[0] <= 2, "committed past the failed record"

    # the same group without the fault: every run arrives, nothing went to the errors topic
    run_until_idle(cmd, tmp_path / "w.log")
    outs = consume_all(kafka_bootstrap, out, expect=6, idle=1.0)
    runs = {o.doc["run"]["facets"]["workflow"]["engineRunId"] for o in outs}
    assert runs == {"r1", "r2", "r3"}
    assert {(o.doc["run"]["facets"]["workflow"]["engineRunId"], o.doc["eventType"]) for o in outs} == {
        (r, t) for r in ("r1", "r2", "r3") for t in ("START", "COMPLETE")
    }
    assert consume_all(kafka_bootstrap, err, idle=0.5) == []
