"""The worker's SIGUSR1 report (``streams/runtime/app.py``; docs/operations.md "A worker that stands
still: SIGUSR1"): where it reads its input, then every thread's stack and every asyncio task."""

from __future__ import annotations

import asyncio
import io
import logging
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from olstream.streams.runtime.app import report_where_it_stands

DESCRIBED = "input partition 0: read position 7, commit base 5"


@pytest.fixture
def helper_thread() -> Iterator[threading.Thread]:
    """A thread that stands still, as faust's consumer thread can."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="olstream-unit-still", daemon=True)
    thread.start()
    yield thread
    stop.set()
    thread.join()


def report_inside_a_loop(describe_input: object, file: io.StringIO) -> None:
    """The report as the loop's signal handler runs it: a callback of the running loop, with a task
    that waits."""

    async def waits_forever() -> None:
        await asyncio.Event().wait()

    async def main() -> None:
        task = asyncio.create_task(waits_forever(), name="olstream-unit-waiting")
        await asyncio.sleep(0)
        done = asyncio.get_running_loop().create_future()

        def handler() -> None:
            report_where_it_stands(describe_input, file)  # type: ignore[arg-type]
            done.set_result(None)

        asyncio.get_running_loop().call_soon(handler)
        await done
        task.cancel()

    asyncio.run(main())


def test_it_logs_where_the_input_is_read_then_prints_every_thread_and_task(
    caplog: pytest.LogCaptureFixture, helper_thread: threading.Thread
) -> None:
    out = io.StringIO()
    with caplog.at_level(logging.WARNING):
        report_inside_a_loop(lambda: DESCRIBED, out)
    assert [r.getMessage() for r in caplog.records] == [
        f"SIGUSR1: where the worker reads its input:\n{DESCRIBED}"
    ]
    printed = out.getvalue()
    assert "THREAD MainThread" in printed
    assert "THREAD olstream-unit-still" in printed  # every thread's stack
    assert "in report_inside_a_loop" in printed
    assert "TASKS" in printed
    assert "TASK olstream-unit-waiting" in printed  # every task of the running loop, with its stack
    assert "in waits_forever" in printed


def test_a_description_that_raises_hides_nothing_of_the_dump(
    caplog: pytest.LogCaptureFixture, helper_thread: threading.Thread
) -> None:
    def describe() -> str:
        raise RuntimeError("the tracker is gone")

    out = io.StringIO()
    with caplog.at_level(logging.WARNING):
        report_inside_a_loop(describe, out)
    assert [r.getMessage() for r in caplog.records] == [
        "SIGUSR1: could not describe the worker's input: the tracker is gone"
    ]
    assert "THREAD olstream-unit-still" in out.getvalue()
    assert "TASK olstream-unit-waiting" in out.getvalue()


def test_without_a_description_it_prints_the_threads_and_tasks(caplog: pytest.LogCaptureFixture) -> None:
    out = io.StringIO()
    with caplog.at_level(logging.WARNING):
        report_inside_a_loop(None, out)
    assert not caplog.records
    assert "THREAD MainThread" in out.getvalue()


def test_a_stderr_that_fails_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError("stderr is closed")

    with caplog.at_level(logging.WARNING):
        report_where_it_stands(lambda: DESCRIBED, Broken())  # outside any loop, too
    assert [r.getMessage() for r in caplog.records] == [
        f"SIGUSR1: where the worker reads its input:\n{DESCRIBED}",
        "SIGUSR1: could not print the worker's threads and tasks: stderr is closed",
    ]


SIGNALLED = textwrap.dedent(
    """
    import asyncio, logging, os, signal, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    asyncio.set_event_loop(asyncio.new_event_loop())
    from olstream.streams.framed_input import InputFraming
    from olstream.streams.runtime.app import build_app, worker_process
    from olstream.streams.settings import WorkerSettings
    settings = WorkerSettings(data_dir=sys.argv[1], app_id="unit-sigusr1")
    sa = build_app(settings, partitions=1, framing=InputFraming(None))
    worker = worker_process(sa, describe_input=lambda: {described!r})
    worker.install_signal_handlers()  # mode's, then the worker's own
    os.kill(os.getpid(), signal.SIGUSR1)
    asyncio.get_event_loop().run_until_complete(asyncio.sleep(0.5))
    print("END", file=sys.stderr, flush=True)
    """
).format(described=DESCRIBED)


def test_a_real_sigusr1_reaches_the_workers_report_in_place_of_modes(tmp_path: Path) -> None:
    """In a process of its own (a real signal, handlers installed as the worker installs them)."""
    done = subprocess.run(
        [sys.executable, "-c", SIGNALLED, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    err = done.stderr
    assert done.returncode == 0, err
    assert f"WARNING SIGUSR1: where the worker reads its input:\n{DESCRIBED}" in err
    described = err.index("SIGUSR1: where the worker reads its input")
    assert described < err.index("THREAD MainThread") < err.index("TASKS") < err.index("END")
    assert err.count("THREAD MainThread") == 1  # mode's handler, replaced, printed nothing
