"""The log lines of a routine broker restart (issue 50 item 7): source, one worker and the sink run
against a single broker of their own; the broker is killed (kill -9), kept down
`BROKER_DOWN_SECONDS`, and restarted on its data dir. From the kill until `AFTER_RESTART_SECONDS`
after the broker answers again each service logs at most `MOST_LINES` WARNING/ERROR lines: a lost
connection is one WARNING, its end one INFO, not a line per retry (olstream.shared.connection_logs);
each service logs that INFO soon after. The sink logs JSON (`--log-format json`), the others text.
Nothing is lost meanwhile.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.support.pipeline_support import (
    GrowingLog,
    Pipeline,
    assert_complete_identical_and_ordered,
    local_cluster,
    wait_until_delivered,
)

pytestmark = pytest.mark.integration

RUNS_FIRST = 200
RUNS_DURING_OUTAGE = 40
BROKER_DOWN_SECONDS = 15.0
AFTER_RESTART_SECONDS = 30.0
MOST_LINES = 10  # per service, WARNING or ERROR (issue 50: "Done when")
_TEXT_LEVEL = re.compile(r"^\S+ \S+ (?P<level>[A-Z]+) (?P<logger>\S+): (?P<message>.*)$")


class JsonSinkPipeline(Pipeline):
    """The pipeline with the sink logging JSON lines, the source and the worker text."""

    def commands(self, until_idle: bool = False) -> dict[str, list[str]]:
        out = super().commands(until_idle)
        out["sink"] = [*out["sink"], "--log-format", "json"]
        return out


def _level_logger_message(line: str) -> tuple[str, str, str] | None:
    """(level, logger, message) of one log line, text or JSON; None for a traceback's lines."""
    if line.startswith("{"):
        try:
            doc = json.loads(line)
        except ValueError:
            return None
        return str(doc.get("level")), str(doc.get("logger")), str(doc.get("message"))
    match = _TEXT_LEVEL.match(line)
    return (match["level"], match["logger"], match["message"]) if match else None


def _lines(path: Path, start: int, end: int | None = None) -> list[tuple[str, str, str]]:
    """(level, logger, message) of each line of a log between two byte offsets."""
    with path.open("rb") as f:
        f.seek(start)
        chunk = f.read() if end is None else f.read(end - start)
    return [
        parsed
        for raw in chunk.decode(errors="replace").splitlines()
        if (parsed := _level_logger_message(raw))
    ]


def _loud_lines(path: Path, start: int, end: int | None = None) -> list[str]:
    """The WARNING/ERROR/CRITICAL lines of a log between two byte offsets."""
    return [
        f"{level} {logger}: {message}"
        for level, logger, message in _lines(path, start, end)
        if level in ("WARNING", "ERROR", "CRITICAL")
    ]


def _wait_until_back(pipeline: Pipeline, since: dict[str, int], timeout: float) -> dict[str, list[str]]:
    """Each service's INFO lines "connection to ... back after", once it has one for each "lost
    connection" WARNING (an outage ends `connection_logs.QUIET_SECONDS` after its last error)."""
    deadline = time.monotonic() + timeout
    while True:
        lost, back = {}, {}
        for name, start in since.items():
            lines = _lines(pipeline.log(name), start)
            lost[name] = [
                m for level, _n, m in lines if level == "WARNING" and m.startswith("lost connection to")
            ]
            back[name] = [m for level, _n, m in lines if level == "INFO" and " back after " in m]
        if all(len(back[name]) >= len(lost[name]) for name in since) or time.monotonic() > deadline:
            assert all(lost.values()), f"a service logged no lost connection: {lost}"
            assert all(len(back[name]) >= len(lost[name]) for name in since), f"lost {lost}, back {back}"
            return back
        pipeline.check_running()
        time.sleep(1.0)


def _sizes(pipeline: Pipeline) -> dict[str, int]:
    return {name: pipeline.log(name).stat().st_size for name in pipeline.procs}


def _wait_for_delivered(pipeline: Pipeline, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(pipeline.delivered()) < count:
        assert time.monotonic() < deadline, (
            f"fewer than {count} events in {timeout:.0f} s:\n{pipeline.logs()}"
        )
        pipeline.check_running()
        time.sleep(0.5)


def _summary(lines: list[str]) -> str:
    shapes = Counter(re.sub(r"\d+", "N", line)[:160] for line in lines)
    return "\n".join(f"  {n:5d} {shape}" for shape, n in shapes.most_common(12))


def test_a_15_s_broker_outage_leaves_few_warning_and_error_lines_per_service(tmp_path: Path) -> None:
    with local_cluster(tmp_path / "kafka", brokers=1) as cluster:
        log = GrowingLog(tmp_path / "events.db")
        log.append(RUNS_FIRST)
        pipeline = JsonSinkPipeline(
            tmp_path, cluster.bootstrap, log.url, f"outage-{uuid.uuid4().hex[:8]}", workers=1
        )
        pipeline.start()
        try:
            _wait_for_delivered(pipeline, 100, timeout=180)
            at_kill = _sizes(pipeline)
            os.kill(cluster.state.nodes[0].pid, signal.SIGKILL)
            log.append(RUNS_DURING_OUTAGE)  # the source has rows to publish while the broker is away
            time.sleep(BROKER_DOWN_SECONDS)
            assert cluster.restart_missing().started
            answered = time.monotonic()
            starts, ends = log.expected()
            wait_until_delivered(pipeline, starts, ends, timeout=120)
            time.sleep(max(0.0, answered + AFTER_RESTART_SECONDS - time.monotonic()))
            at_end = _sizes(pipeline)
            back = _wait_until_back(pipeline, at_kill, timeout=60)
        finally:
            pipeline.stop()
        assert_complete_identical_and_ordered(pipeline.delivered(), starts, ends)
    loud = {name: _loud_lines(pipeline.log(name), at_kill[name], at_end[name]) for name in at_kill}
    for name, lines in loud.items():
        later = _loud_lines(pipeline.log(name), at_end[name])
        print(
            f"{name}: {len(lines)} WARNING/ERROR lines in the window ({len(later)} after it)\n"
            + _summary(lines)
        )
    print(f"ends of the outage: {back}")
    too_many = {name: len(lines) for name, lines in loud.items() if len(lines) > MOST_LINES}
    assert not too_many, f"more than {MOST_LINES} WARNING/ERROR lines: {too_many}"
