"""Helpers shared by the local services: state files, the child processes they start, pid checks,
stopping by pid, ports, log tails, XDG folders."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from olstream.shared.errors import InfrastructureError

T = TypeVar("T")


def read_state_file(path: Path, factory: Callable[..., T], what: str) -> T | None:
    """The JSON state file a service wrote when it started, as `factory(**fields)`; None when absent."""
    try:
        return factory(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as e:
        raise InfrastructureError(f"unreadable {what} state file {path}: {e}") from e


def write_state_file(path: Path, state: Any) -> None:
    """Record a service's state (a dataclass) as the JSON `read_state_file` reads, atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2) + "\n")
    tmp.replace(path)


def state_home() -> Path:
    """`$XDG_STATE_HOME`, else ~/.local/state: where the services keep their data dirs."""
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")


def cache_home() -> Path:
    """`$XDG_CACHE_HOME`, else ~/.cache: where resolved jars are cached per version."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def pid_alive(pid: int) -> bool:
    """True when the process exists and is not a zombie (reaps it if it is our own child)."""
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # The state field follows the parenthesised command name.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def running_pid(pid_file: Path) -> int | None:
    """The pid written in `pid_file` while that process lives; None otherwise."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def answers_json(url: str, timeout: float = 2.0) -> bool:
    """True when a GET of `url` answers 200 with a JSON body (a local server's readiness)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            json.load(resp)
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError, ValueError):
        return False


def pid_cmdline(pid: int) -> list[str]:
    """The process's command line, or [] when it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def stop_pid(pid: int, timeout: float = 30.0, first_signal: signal.Signals = signal.SIGTERM) -> bool:
    """Signal the process (SIGTERM), SIGKILL it after `timeout` seconds; True when it had to be killed."""
    try:
        os.kill(pid, first_signal)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return False
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


class ChildProcesses:
    """The service processes this process started, kept so they are reaped (no zombies, no
    warnings about a still-running `Popen`) when they exit or are stopped."""

    def __init__(self) -> None:
        self._by_pid: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, cmd: Sequence[str], output: Path, cwd: Path) -> subprocess.Popen[bytes]:
        """Launch `cmd` in its own session (a Ctrl-C of ours does not reach it) with stdout and
        stderr appended to `output`, and keep it."""
        with output.open("ab") as out:
            child = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
            )
        self.add(child)
        return child

    def add(self, child: subprocess.Popen[bytes]) -> None:
        self._by_pid[child.pid] = child

    def get(self, pid: int) -> subprocess.Popen[bytes] | None:
        return self._by_pid.get(pid)

    def is_running(self, pid: int, *command_args: str) -> bool:
        """The pid is alive (not a child of ours that exited) and, when its command line can be
        read, it holds every one of `command_args` (so a recycled pid is not taken for ours)."""
        child = self._by_pid.get(pid)
        if child is not None and child.poll() is not None:
            return False
        if not pid_alive(pid):
            return False
        cmdline = pid_cmdline(pid)
        if not cmdline:
            return True
        return all(arg in cmdline for arg in command_args)

    def reap(self, pid: int) -> None:
        """Forget the child of `pid` (collecting its exit status when it has exited)."""
        child = self._by_pid.pop(pid, None)
        if child is not None:
            child.poll()

    def reap_finished(self) -> None:
        """Reap every kept child that has exited."""
        for pid in list(self._by_pid):
            if self._by_pid[pid].poll() is not None or not pid_alive(pid):
                self.reap(pid)


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_free(host: str, port: int) -> bool:
    """True when a listening socket could be bound to host:port right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # as a server socket would (Java's do): TIME_WAIT leftovers of a stopped broker do not count
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_CHOSEN_PORT = 20000


def ephemeral_ports() -> range:
    """The ports the kernel hands out as the local end of outgoing connections (Linux's default
    32768-60999 where the setting cannot be read)."""
    try:
        low, high = (int(field) for field in EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def free_port(host: str = "127.0.0.1", avoid: frozenset[int] = frozenset(), run: int = 1) -> int:
    """A TCP port P such that P .. P+run-1 are free now and none of them is ephemeral.

    Racy by nature (good enough for tests and the demo), but never a port the kernel may give
    meanwhile to an outgoing connection's local end: a port found by binding to port 0 is
    ephemeral, and a busy neighbour (another test session's clients) can take it before the
    server that was meant to listen on it starts.
    """
    ephemeral = ephemeral_ports()
    candidates = [
        p for p in range(LOWEST_CHOSEN_PORT, 65537 - run) if p + run <= ephemeral.start or p >= ephemeral.stop
    ]
    for _ in range(200 if candidates else 0):
        port = random.choice(candidates)
        wanted = range(port, port + run)
        if not avoid.intersection(wanted) and all(port_free(host, p) for p in wanted):
            return port
    last = ephemeral.stop - 1
    raise OSError(f"no {run} free TCP port(s) in a row outside the ephemeral range {ephemeral.start}-{last}")


def tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a text file ("" when it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock held for the duration of the block (serialises up/down)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
