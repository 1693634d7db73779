"""The embedded event-log store: one SQLite file in WAL mode.

URL forms: ``sqlite:///abs/path/events.db`` (absolute path; ``sqlite:////abs`` works too) and
``sqlite:relative/events.db`` (relative to the working directory).

Tables: ``meta(key, value)`` holds the partition count; ``events("partition", "offset", payload)``
with primary key (partition, offset) holds the rows. Offsets are assigned inside the append
transaction (``BEGIN IMMEDIATE`` takes SQLite's single write lock), so several writer processes
may append at once and offsets stay dense. WAL mode lets readers run while a writer commits;
``busy_timeout`` makes a second writer wait for the lock instead of failing.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from olstream.eventlog.store import FixedPartitions, StoredRow

logger = logging.getLogger(__name__)

DEFAULT_PARTITIONS = 8
BUSY_TIMEOUT_MS = 30_000
POLL_INTERVAL_S = 0.02

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    'CREATE TABLE IF NOT EXISTS events ("partition" INTEGER NOT NULL, "offset" INTEGER NOT NULL, '
    'payload BLOB NOT NULL, PRIMARY KEY ("partition", "offset")) WITHOUT ROWID',
)


def path_from_url(url: str) -> Path:
    """The database file a ``sqlite:`` URL names."""
    if not url.startswith("sqlite:"):
        raise ValueError(f"not a SQLite event-log URL: {url!r}")
    rest = url[len("sqlite:") :]
    if rest.startswith("//"):
        rest = rest[2:]
        if not rest.startswith("/"):
            raise ValueError(f"SQLite URL {url!r} needs a path: sqlite:///abs/path.db or sqlite:rel/path.db")
    rest = rest.split("?", 1)[0]
    if rest.startswith("/"):
        rest = "/" + rest.lstrip("/")  # sqlite:////abs/path (SQLAlchemy style) too
    if not rest or rest == "/":
        raise ValueError(f"SQLite URL {url!r} names no file")
    return Path(rest)


class SqliteEventLogStore(FixedPartitions):
    """An event log in one SQLite file; safe for one writer and many readers, across processes."""

    def __init__(self, url: str, conn: sqlite3.Connection, partition_count: int) -> None:
        self.url = url
        self._conn = conn
        self._partition_count = partition_count
        self._lock = threading.Lock()
        self._data_version = self._read_data_version()
        self._appended_here = False

    @classmethod
    def open(cls, url: str, *, partitions: int | None = None, create: bool = False) -> SqliteEventLogStore:
        """Open the log at `url`; with `create=True` create it (with `partitions`, default 8) if missing."""
        path = path_from_url(url)
        if not path.exists() and not create:
            raise FileNotFoundError(f"no event log at {path} (from {url!r}); create it first")
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        count = cls._ensure_schema(conn, url, partitions, create)
        logger.debug("opened SQLite event log %s with %d partitions", path, count)
        return cls(url, conn, count)

    @staticmethod
    def _ensure_schema(conn: sqlite3.Connection, url: str, partitions: int | None, create: bool) -> int:
        if partitions is not None and partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        conn.execute("BEGIN IMMEDIATE" if create else "BEGIN")
        try:
            has_meta = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
            ).fetchone()
            row = (
                conn.execute("SELECT value FROM meta WHERE key = 'partitions'").fetchone()
                if has_meta
                else None
            )
            if row is None:
                if not create:
                    raise FileNotFoundError(f"{url!r} is not an olstream event log (no meta table)")
                for stmt in _SCHEMA:
                    conn.execute(stmt)
                count = partitions or DEFAULT_PARTITIONS
                conn.execute("INSERT INTO meta (key, value) VALUES ('partitions', ?)", (str(count),))
            else:
                count = int(row[0])
                if partitions is not None and partitions != count:
                    raise ValueError(
                        f"event log {url!r} has {count} partitions, not the {partitions} asked for"
                    )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return count

    def _read_data_version(self) -> int:
        with self._lock:
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def read(self, partition: int, after_offset: int, limit: int) -> list[StoredRow]:
        self._check_read(partition, limit)
        with self._lock:
            rows = self._conn.execute(
                'SELECT "offset", payload FROM events WHERE "partition" = ? AND "offset" > ? '
                'ORDER BY "offset" LIMIT ?',
                (partition, after_offset, limit),
            ).fetchall()
        return [StoredRow(partition, int(off), bytes(payload)) for off, payload in rows]

    def heads(self) -> dict[int, int]:
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN")
            try:
                return {p: self._head(cur, p) for p in range(self._partition_count)}
            finally:
                cur.execute("COMMIT")

    @staticmethod
    def _head(cur: sqlite3.Cursor, partition: int) -> int:
        row = cur.execute('SELECT MAX("offset") FROM events WHERE "partition" = ?', (partition,)).fetchone()
        return -1 if row is None or row[0] is None else int(row[0])

    def append(self, partition: int, build: Callable[[int], bytes]) -> int:
        return self.append_many([(partition, build)])[0]

    def append_many(self, items: Sequence[tuple[int, Callable[[int], bytes]]]) -> list[int]:
        if not items:
            return []
        for partition, _ in items:
            self._check_partition(partition)
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                next_offsets: dict[int, int] = {}
                offsets: list[int] = []
                rows: list[tuple[int, int, bytes]] = []
                for partition, build in items:
                    off = next_offsets.get(partition)
                    if off is None:
                        off = self._head(cur, partition) + 1
                    next_offsets[partition] = off + 1
                    rows.append((partition, off, build(off)))
                    offsets.append(off)
                cur.executemany('INSERT INTO events ("partition", "offset", payload) VALUES (?, ?, ?)', rows)
                cur.execute("COMMIT")
                self._appended_here = True
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return offsets

    def wait_for_change(self, timeout: float) -> bool:
        """Poll ``PRAGMA data_version`` (changes when another connection commits) until `timeout`.

        Appends through this same store object count as a change too.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            version = self._read_data_version()
            if version != self._data_version or self._appended_here:
                self._appended_here = False
                self._data_version = version
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(POLL_INTERVAL_S, remaining))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
