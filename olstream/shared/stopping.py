"""A bounded stop for every service: after the first SIGTERM or SIGINT, a process has `--stop-timeout`
seconds to exit on its own; then it leaves at once with `ExitCode.STOP_TIMEOUT`.

Each service keeps its own signal handling (the source's `signal.signal` handlers, the sink's and
faust's `loop.add_signal_handler`); `install_stop_deadline` chains onto whatever Python-level handler
is installed when it is called, so it must be called after the service installed its own:

- a handler set with `signal.signal` is chained, not replaced: it is called once the deadline is armed;
- asyncio's `add_signal_handler` leaves a no-op Python-level handler and dispatches through its
  wakeup fd, which is written by the C-level handler whatever the Python-level one is: asyncio still
  sees the signal;
- a default action (`SIG_DFL`) is still taken once the deadline is armed; an ignored signal
  (`SIG_IGN`) stays ignored and arms nothing.

The deadline runs on a daemon thread started at install time; the signal handler only sets a flag and
an event, so it works while the main thread or the event loop is stuck (in a blocking call, a loop
that never yields, or a shutdown that waits forever). A second signal neither re-arms nor extends the
deadline. When it expires, one critical line is logged (from a helper thread, given at most
`LOG_GRACE` seconds so that a blocked stderr cannot hold the exit) and the process calls `os._exit`:
nothing that was not committed is committed, exactly as after `kill -9`, which every service
survives (a restart reads again from the last commit).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from olstream.shared.config import Setting, positive
from olstream.shared.errors import ExitCode

log = logging.getLogger(__name__)

STOP_TIMEOUT = Setting(
    "stop_timeout",
    30.0,
    "after SIGTERM/SIGINT, leave at once (exit STOP_TIMEOUT, nothing more committed) "
    "if not stopped within N s",
    parse=float,
    check=positive,
)
"""The setting every long-running service declares: `--stop-timeout`, `OLSTREAM_STOP_TIMEOUT`."""

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
LOG_GRACE = 1.0  # s the critical line may take before the process leaves anyway

Handler = Callable[[int, FrameType | None], Any] | int | None


class StopDeadline:
    """Leaves the process (`leave(exit_code)`, `os._exit` by default) `seconds` after `arm`."""

    def __init__(
        self,
        seconds: float,
        service: str,
        *,
        exit_code: int = ExitCode.STOP_TIMEOUT,
        leave: Callable[[int], object] = os._exit,
    ) -> None:
        self.seconds = seconds
        self.service = service
        self.exit_code = int(exit_code)
        self.signal_name: str | None = None
        self.armed_at: float | None = None
        self._leave = leave
        self._armed = False
        self._armed_event = threading.Event()
        self._cancelled = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def armed(self) -> bool:
        return self._armed

    def start(self) -> None:
        """Start the watcher thread (before any signal: a signal handler only sets an event)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="olstream-stop-deadline", daemon=True)
            self._thread.start()

    def arm(self, signum: int) -> None:
        """Start the countdown; safe in a signal handler. Later calls change nothing."""
        if self._armed:
            return
        self._armed = True  # first: a signal handled while this one runs returns at once
        self.signal_name = signal_name(signum)
        self.armed_at = time.monotonic()
        self._armed_event.set()

    def cancel(self) -> None:
        """Stop the watcher without leaving (tests, and a process that embeds a service)."""
        self._cancelled.set()
        self._armed_event.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _watch(self) -> None:
        self._armed_event.wait()
        if self._cancelled.is_set() or self._cancelled.wait(self.seconds):
            return
        self._expire()

    def _expire(self) -> None:
        line = threading.Thread(
            target=log.critical,
            args=(
                "%s: still running %.1f s after %s (--stop-timeout): leaving at once with exit code %d "
                "(%s); nothing more is committed, a restart reads again from the last commit",
                self.service,
                self.seconds,
                self.signal_name,
                self.exit_code,
                _code_name(self.exit_code),
            ),
            name="olstream-stop-deadline-log",
            daemon=True,
        )
        line.start()
        line.join(LOG_GRACE)
        for handler in logging.getLogger().handlers:
            try:
                handler.flush()
            except Exception:  # leaving anyway: a handler that cannot flush must not hold the exit
                continue
        self._leave(self.exit_code)


class ChainedHandler:
    """The Python-level handler of one signal: arms the deadline, then does what `previous` did."""

    def __init__(self, deadline: StopDeadline, previous: Handler) -> None:
        self.deadline = deadline
        self.previous = previous

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        previous = self.previous
        if previous == signal.SIG_IGN:
            return  # ignored before: no stop begins, so no deadline either
        self.deadline.arm(signum)
        if callable(previous):
            previous(signum, frame)
            return
        # SIG_DFL, or a handler not installed from Python: the signal's default action
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def install_stop_deadline(
    seconds: float, service: str, signals: Iterable[int] = STOP_SIGNALS, **kwargs: Any
) -> StopDeadline:
    """Chain a `StopDeadline` of `seconds` onto the current handlers of `signals` (main thread only).

    Call it after the service installed its own handling; `kwargs` go to `StopDeadline`.
    """
    deadline = StopDeadline(seconds, service, **kwargs)
    deadline.start()
    for sig in signals:
        signal.signal(sig, ChainedHandler(deadline, signal.getsignal(sig)))
    log.debug("%s: a stop signal leaves after %.1f s at most", service, seconds)
    return deadline


def installed_deadline(sig: int = signal.SIGTERM) -> StopDeadline | None:
    """The deadline chained onto `sig`'s current Python-level handler, if any."""
    handler = signal.getsignal(sig)
    return handler.deadline if isinstance(handler, ChainedHandler) else None


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _code_name(code: int) -> str:
    try:
        return ExitCode(code).name
    except ValueError:
        return str(code)
