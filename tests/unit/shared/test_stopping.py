"""The bounded stop (`olstream/shared/stopping.py`): armed by the first signal, chained onto the service's
own handling (signal.signal handlers and asyncio's add_signal_handler alike), never extended, and
leaving with STOP_TIMEOUT even when the main thread is stuck or a log line cannot be written."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from olstream.connectors.sink.settings import build_settings
from olstream.connectors.source.settings import resolve_source_settings
from olstream.shared import stopping
from olstream.shared.errors import EXIT_MEANINGS, ConfigError, ExitCode
from olstream.shared.stopping import (
    STOP_TIMEOUT,
    ChainedHandler,
    StopDeadline,
    install_stop_deadline,
    installed_deadline,
)
from olstream.streams.settings import resolve_worker_settings
from tests.support.paths import REPO

SIG = signal.SIGUSR1  # never SIGTERM/SIGINT in-process: pytest itself relies on them


class Leaves:
    """A fake `os._exit` that records the code and when it was called."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.at: list[float] = []
        self.done = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.at.append(time.monotonic())
        self.done.set()


@pytest.fixture
def usr1() -> Iterator[None]:
    previous = signal.getsignal(SIG)
    try:
        yield
    finally:
        signal.signal(SIG, previous)


def deliver(sig: int = SIG) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(0.05)  # the handler runs in the main thread at its next bytecode


# ---------------------------------------------------------------------------- the deadline


def test_the_deadline_leaves_with_stop_timeout_after_its_seconds() -> None:
    leaves = Leaves()
    deadline = StopDeadline(0.3, "svc", leave=leaves)
    deadline.start()
    deadline.arm(signal.SIGTERM)
    armed = time.monotonic()
    assert leaves.done.wait(5)
    assert leaves.codes == [ExitCode.STOP_TIMEOUT] and ExitCode.STOP_TIMEOUT == 124
    assert 0.25 <= leaves.at[0] - armed <= 2.0
    assert deadline.signal_name == "SIGTERM"


def test_a_second_signal_neither_rearms_nor_extends() -> None:
    leaves = Leaves()
    deadline = StopDeadline(0.6, "svc", leave=leaves)
    deadline.start()
    deadline.arm(signal.SIGTERM)
    first = deadline.armed_at
    time.sleep(0.4)
    deadline.arm(signal.SIGINT)
    assert deadline.armed_at == first and deadline.signal_name == "SIGTERM"
    assert leaves.done.wait(5)
    assert first is not None and leaves.at[0] - first < 0.6 + 0.35  # not 0.4 + 0.6
    deadline.join(2)
    assert leaves.codes == [ExitCode.STOP_TIMEOUT], "left once"


def test_unarmed_or_cancelled_it_never_leaves() -> None:
    leaves = Leaves()
    idle = StopDeadline(0.1, "svc", leave=leaves)
    idle.start()
    cancelled = StopDeadline(0.1, "svc", leave=leaves)
    cancelled.start()
    cancelled.arm(signal.SIGTERM)
    cancelled.cancel()
    time.sleep(0.4)
    idle.cancel()
    idle.join(2)
    cancelled.join(2)
    assert leaves.codes == []


def test_it_logs_one_critical_line_naming_the_setting_and_the_code(caplog: pytest.LogCaptureFixture) -> None:
    leaves = Leaves()
    deadline = StopDeadline(0.05, "worker", leave=leaves)
    deadline.start()
    with caplog.at_level(logging.CRITICAL, logger="olstream.shared.stopping"):
        deadline.arm(signal.SIGTERM)
        assert leaves.done.wait(5)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert len(lines) == 1
    assert "worker: still running 0.1 s after SIGTERM (--stop-timeout)" in lines[0]
    assert "exit code 124 (STOP_TIMEOUT)" in lines[0]


def test_it_leaves_even_when_its_log_line_cannot_be_written(monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = threading.Event()

    def stuck_log(*args: object, **kwargs: object) -> None:
        blocked.wait()  # stderr full, a lock held forever: the line never gets out

    monkeypatch.setattr(stopping.log, "critical", stuck_log)
    leaves = Leaves()
    deadline = StopDeadline(0.05, "svc", leave=leaves)
    deadline.start()
    deadline.arm(signal.SIGTERM)
    try:
        assert leaves.done.wait(stopping.LOG_GRACE + 3)
    finally:
        blocked.set()


# ---------------------------------------------------------------------------- chaining


def test_it_chains_onto_a_signal_signal_handler(usr1: None) -> None:
    seen: list[int] = []

    def own(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    signal.signal(SIG, own)
    leaves = Leaves()
    deadline = install_stop_deadline(60, "svc", signals=(SIG,), leave=leaves)
    try:
        assert isinstance(signal.getsignal(SIG), ChainedHandler)
        assert installed_deadline(SIG) is deadline
        deliver()
        assert seen == [SIG], "the service's own handler still runs"
        assert deadline.armed
        deliver()
        assert seen == [SIG, SIG]
    finally:
        deadline.cancel()


def test_it_chains_onto_asyncio_add_signal_handler(usr1: None) -> None:
    """asyncio's handler sees the signal through its wakeup fd, whatever the Python-level handler is."""
    leaves = Leaves()

    async def main() -> StopDeadline:
        loop = asyncio.get_running_loop()
        seen = asyncio.Event()
        loop.add_signal_handler(SIG, seen.set)
        deadline = install_stop_deadline(60, "svc", signals=(SIG,), leave=leaves)
        os.kill(os.getpid(), SIG)
        await asyncio.wait_for(seen.wait(), 5)
        loop.remove_signal_handler(SIG)
        return deadline

    deadline = asyncio.run(main())
    try:
        assert deadline.armed
    finally:
        deadline.cancel()


def test_an_ignored_signal_stays_ignored_and_arms_nothing(usr1: None) -> None:
    signal.signal(SIG, signal.SIG_IGN)
    deadline = install_stop_deadline(60, "svc", signals=(SIG,), leave=Leaves())
    try:
        deliver()
        assert not deadline.armed
    finally:
        deadline.cancel()


def test_a_stuck_process_leaves_with_stop_timeout_and_a_second_signal_does_not_extend(tmp_path: Path) -> None:
    """A real process whose main thread never returns: SIGTERM, again 1 s later; it leaves at 1.5 s."""
    script = textwrap.dedent(
        """
        import signal, sys, threading, time
        from olstream.shared.stopping import install_stop_deadline
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda s, f: stop.set())  # the service's own handler
        install_stop_deadline(1.5, "test")
        print("ready", flush=True)
        while True:  # stuck whatever the signal says
            time.sleep(3600)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(10)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == ExitCode.STOP_TIMEOUT
    assert 1.3 <= took <= 1.5 + 1.5, took
    assert proc.stderr is not None and b"(--stop-timeout): leaving at once" in proc.stderr.read()


# ---------------------------------------------------------------------------- the setting and the code


def test_every_service_declares_stop_timeout(tmp_path: Path) -> None:
    assert (STOP_TIMEOUT.flag_name, STOP_TIMEOUT.env_name, STOP_TIMEOUT.default) == (
        "--stop-timeout",
        "OLSTREAM_STOP_TIMEOUT",
        30.0,
    )
    env = {"OLSTREAM_STOP_TIMEOUT": "7.5"}
    assert resolve_worker_settings({}, {})[0].stop_timeout == 30.0
    assert resolve_worker_settings({}, env)[0].stop_timeout == 7.5
    assert resolve_worker_settings({"stop_timeout": "2"}, env)[0].stop_timeout == 2.0
    log = {"log_url": "sqlite:///x.db"}
    assert resolve_source_settings(log, env)[0].stop_timeout == 7.5
    assert build_settings({"console": True}, env, tmp_path, tmp_path).stop_timeout == 7.5
    with pytest.raises(ConfigError, match="stop_timeout"):
        resolve_worker_settings({"stop_timeout": "0"}, {})


def test_stop_timeout_has_its_meaning_in_the_one_table() -> None:
    assert "--stop-timeout" in EXIT_MEANINGS[ExitCode.STOP_TIMEOUT]
