"""What the local launchers (`olstream kafka|mirror|postgres up|down|status`) share: a server started
for a data dir is recorded in its state file, found again by it, and stopped by its pid.

`up` holds the data dir's lock (`starting`) while it checks for a running server and starts one;
`down` (`stop`) stops exactly the process recorded there, and only when its pid is still that
server's (`is_ours`: not a pid the system gave to something else since).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from olstream.devkit import process


class Recorded(Protocol):
    """A state file's contents: at least the server's pid and its data dir."""

    @property
    def pid(self) -> int: ...

    @property
    def data_dir(self) -> str: ...


S = TypeVar("S", bound=Recorded)


def runs_java(children: process.ChildProcesses, main_class: str, config: str) -> Callable[[Recorded], bool]:
    """`is_ours` of a JVM server: the recorded pid is alive and runs `main_class` with the data dir's
    `config` file (not a pid the system gave to something else since)."""

    def is_ours(state: Recorded) -> bool:
        return children.is_running(state.pid, main_class, str(Path(state.data_dir) / config))

    return is_ours


@dataclass(frozen=True)
class ServerStatus(Generic[S]):
    """Whether the server recorded in `data_dir` runs, and its recorded state (None: none recorded)."""

    running: bool
    data_dir: Path
    state: S | None


@dataclass(frozen=True)
class Launcher(Generic[S]):
    """One kind of local server, recorded in `<data dir>/<state_file>` as `state_type`.

    `children` (the servers this process started) are reaped once stopped; `log` says when a
    server ignored `first_signal` and had to be killed (None: nothing is said).
    """

    name: str  # in messages: "broker", "MirrorMaker", "PostgreSQL"
    state_file: str
    state_type: Callable[..., S]
    is_ours: Callable[[S], bool]
    children: process.ChildProcesses | None = None
    first_signal: signal.Signals = signal.SIGTERM
    log: logging.Logger | None = None

    def read_state(self, data_dir: Path) -> S | None:
        return process.read_state_file(data_dir / self.state_file, self.state_type, self.name)

    def status(self, data_dir: Path) -> ServerStatus[S]:
        state = self.read_state(data_dir)
        return ServerStatus(running=state is not None and self.is_ours(state), data_dir=data_dir, state=state)

    @contextmanager
    def starting(self, data_dir: Path) -> Iterator[S | None]:
        """Hold the data dir's lock; yield the state of the server running for it, else None (a stale
        record of one that no longer runs is removed first)."""
        data_dir.mkdir(parents=True, exist_ok=True)
        with process.file_lock(data_dir / ".lock"):
            current = self.read_state(data_dir)
            if current is not None and self.is_ours(current):
                yield current
                return
            (data_dir / self.state_file).unlink(missing_ok=True)
            yield None

    def abandon(self, pid: int, data_dir: Path) -> None:
        """Stop a server this process just launched (its start failed) and remove its record."""
        process.stop_pid(pid, timeout=10)
        if self.children is not None:
            self.children.reap(pid)
        (data_dir / self.state_file).unlink(missing_ok=True)

    def stop(self, data_dir: Path, timeout: float = 30.0) -> S | None:
        """Stop exactly the server recorded in `data_dir` (`first_signal`, SIGKILL after `timeout`);
        its state, or None when none was recorded or it no longer ran. The record is removed."""
        with process.file_lock(data_dir / ".lock"):
            state = self.read_state(data_dir)
            if state is None:
                return None
            if self.is_ours(state):
                killed = process.stop_pid(state.pid, timeout=timeout, first_signal=self.first_signal)
                if killed and self.log is not None:
                    self.log.warning(
                        "%s pid %d ignored %s for %.0f s and was killed",
                        self.name,
                        state.pid,
                        self.first_signal.name,
                        timeout,
                    )
            else:
                state = None
            if self.children is not None:
                self.children.reap_finished()
            (data_dir / self.state_file).unlink(missing_ok=True)
            return state
