"""The worker's own name for its transactional id (exactly_once), kept in its data dir.

A worker restarted on its data dir (a StatefulSet pod, a systemd unit) uses the same transactional
id as its previous incarnation, so initialising its producer aborts whatever transaction the
previous one left open at once, instead of leaving read_committed readers of the events topic
stalled until the broker's transaction timeout. Two live workers never share one: the first holds
an exclusive lock on the data dir for its life, and a second worker on the same data dir is
refused (exit ``CONFIG``). A fresh data dir gets a new name.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
from dataclasses import dataclass
from typing import IO

from olstream.shared.errors import ConfigError

log = logging.getLogger(__name__)

NAME_FILE = "worker-id"
LOCK_FILE = "worker.lock"


def transactional_id(app_id: str, name: str) -> str:
    """The transactional id of worker `name` of `app_id` (ACLs: the prefix ``{app_id}-``)."""
    return f"{app_id}-worker-{name}"


@dataclass(frozen=True)
class WorkerIdentity:
    """The worker's name, and the open lock file that holds its data dir (kept for the process's life)."""

    name: str
    lock: IO[str]

    def transactional_id(self, app_id: str) -> str:
        return transactional_id(app_id, self.name)


def claim(data_dir: str) -> WorkerIdentity:
    """Lock `data_dir` for this process and read its worker name (written on first use).

    Raises ConfigError when another live process holds the data dir."""
    os.makedirs(data_dir, exist_ok=True)
    lock = open(os.path.join(data_dir, LOCK_FILE), "a+", encoding="utf-8")  # noqa: SIM115 (held for life)
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise ConfigError(
            f"data dir {data_dir} is in use by a running worker (pid {holder}): each worker needs a "
            "data dir of its own (--data-dir)"
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    path = os.path.join(data_dir, NAME_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            name = f.read().strip()
    except FileNotFoundError:
        name = ""
    if not name:
        name = secrets.token_hex(8)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(name + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        log.info("data dir %s: new worker name %s", data_dir, name)
    return WorkerIdentity(name, lock)
