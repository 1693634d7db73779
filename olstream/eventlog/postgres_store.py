"""The PostgreSQL event-log store (psycopg 3).

URL: any libpq ``postgresql://user:pass@host:port/db`` URL.

Tables: ``olstream_meta(key, value)`` holds the partition count; ``olstream_heads("partition",
head)`` the highest offset per partition; ``olstream_events("partition", "offset", payload)`` the
rows. An append locks the partition's head row (``UPDATE ... RETURNING``), so concurrent writers
on one partition serialize and offsets stay dense; it then sends ``NOTIFY olstream_events`` in the
same transaction, delivered at commit, which wakes readers blocked in `wait_for_change` (LISTEN).
When LISTEN is unavailable (e.g. behind a transaction-pooling proxy) readers poll the heads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from olstream.eventlog.store import FixedPartitions, StoredRow
from olstream.shared.errors import InfrastructureError
from olstream.shared.logs import REDACTED, redact, register_secret, register_url_credentials

logger = logging.getLogger(__name__)

DEFAULT_PARTITIONS = 8
CHANNEL = "olstream_events"
POLL_INTERVAL_S = 0.1
_CREATE_LOCK_KEY = 0x6F6C_7374  # advisory lock serializing concurrent creators

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS olstream_meta (key text PRIMARY KEY, value text NOT NULL)",
    'CREATE TABLE IF NOT EXISTS olstream_heads ("partition" integer PRIMARY KEY, head bigint NOT NULL)',
    'CREATE TABLE IF NOT EXISTS olstream_events ("partition" integer NOT NULL, "offset" bigint NOT NULL, '
    'payload bytea NOT NULL, PRIMARY KEY ("partition", "offset"))',
)


def _register_password(url: str) -> None:
    """The URL's password (also `?password=`) and its `user:password` with the log redactor.

    A user name without a password is a role name, not registered (it would vanish from every
    line: the local server's role is `olstream`); the URL itself never shows its user info.
    """
    register_url_credentials(url, lone_user=False)
    try:
        password = psycopg.conninfo.conninfo_to_dict(url).get("password")
    except psycopg.ProgrammingError:
        return
    if password:
        register_secret(str(password))


def _connect_error(url: str, error: psycopg.Error) -> str:
    """libpq's text of a failed connection, redacted, without the role it names (`user "x"`)."""
    text = redact(str(error))
    try:
        user = psycopg.conninfo.conninfo_to_dict(url).get("user")
    except psycopg.ProgrammingError:
        return text
    return text.replace(f'"{user}"', f'"{REDACTED}"') if user else text


class PostgresEventLogStore(FixedPartitions):
    """An event log in PostgreSQL; any number of writer and reader processes."""

    def __init__(self, url: str, conn: psycopg.Connection[Any], partition_count: int) -> None:
        self.url = url
        self._conn = conn
        self._partition_count = partition_count
        self._lock = threading.Lock()
        self._listen_conn: psycopg.Connection[Any] | None = None
        self._listen_failed = False
        self._seen_heads: dict[int, int] | None = None

    @classmethod
    def open(cls, url: str, *, partitions: int | None = None, create: bool = False) -> PostgresEventLogStore:
        """Open the log in the database `url` names; `create=True` creates missing tables."""
        if partitions is not None and partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        _register_password(url)
        try:
            conn = psycopg.connect(url, autocommit=True)
        except psycopg.OperationalError as e:
            raise InfrastructureError(
                f"cannot connect to the event-log database: {_connect_error(url, e)}"
            ) from e
        try:
            count = cls._ensure_schema(conn, partitions, create)
        except BaseException:
            conn.close()
            raise
        logger.debug("opened PostgreSQL event log with %d partitions", count)
        return cls(url, conn, count)

    @staticmethod
    def _ensure_schema(conn: psycopg.Connection[Any], partitions: int | None, create: bool) -> int:
        with conn.transaction():
            if create:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_CREATE_LOCK_KEY,))
            exists = conn.execute("SELECT to_regclass('olstream_meta') IS NOT NULL").fetchone()
            row = None
            if exists and exists[0]:
                row = conn.execute("SELECT value FROM olstream_meta WHERE key = 'partitions'").fetchone()
            if row is None:
                if not create:
                    raise FileNotFoundError("the database holds no olstream event log; create it first")
                for stmt in _SCHEMA:
                    conn.execute(stmt)
                count = partitions or DEFAULT_PARTITIONS
                conn.execute(
                    "INSERT INTO olstream_meta (key, value) VALUES ('partitions', %s)", (str(count),)
                )
                with conn.cursor() as cur:
                    cur.executemany(
                        'INSERT INTO olstream_heads ("partition", head) VALUES (%s, -1)',
                        [(p,) for p in range(count)],
                    )
                return count
            count = int(row[0])
            if partitions is not None and partitions != count:
                raise ValueError(f"the event log has {count} partitions, not the {partitions} asked for")
            return count

    def read(self, partition: int, after_offset: int, limit: int) -> list[StoredRow]:
        self._check_read(partition, limit)
        self._listener()  # LISTEN before the first read: no append after it goes unnoticed
        with self._lock:
            rows = self._conn.execute(
                'SELECT "offset", payload FROM olstream_events WHERE "partition" = %s AND "offset" > %s '
                'ORDER BY "offset" LIMIT %s',
                (partition, after_offset, limit),
            ).fetchall()
        return [StoredRow(partition, int(off), bytes(payload)) for off, payload in rows]

    def heads(self) -> dict[int, int]:
        with self._lock:
            rows = self._conn.execute('SELECT "partition", head FROM olstream_heads').fetchall()
        out = dict.fromkeys(range(self._partition_count), -1)
        out.update({int(p): int(h) for p, h in rows})
        return out

    def append(self, partition: int, build: Callable[[int], bytes]) -> int:
        return self.append_many([(partition, build)])[0]

    def append_many(self, items: Sequence[tuple[int, Callable[[int], bytes]]]) -> list[int]:
        if not items:
            return []
        counts = Counter(partition for partition, _ in items)
        for partition in counts:
            self._check_partition(partition)
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            next_offsets: dict[int, int] = {}
            for partition in sorted(counts):  # a fixed lock order: no deadlocks between writers
                cur.execute(
                    'UPDATE olstream_heads SET head = head + %s WHERE "partition" = %s RETURNING head',
                    (counts[partition], partition),
                )
                row = cur.fetchone()
                if row is None:
                    raise ValueError(f"partition {partition} has no head row in the event log")
                next_offsets[partition] = int(row[0]) - counts[partition] + 1
            offsets: list[int] = []
            with cur.copy('COPY olstream_events ("partition", "offset", payload) FROM STDIN') as copy:
                for partition, build in items:
                    off = next_offsets[partition]
                    next_offsets[partition] = off + 1
                    copy.write_row((partition, off, build(off)))
                    offsets.append(off)
            cur.execute("SELECT pg_notify(%s, '')", (CHANNEL,))
        return offsets

    def _listener(self) -> psycopg.Connection[Any] | None:
        if self._listen_conn is None and not self._listen_failed:
            try:
                conn = psycopg.connect(self.url, autocommit=True)
                conn.execute(f"LISTEN {CHANNEL}")
                self._listen_conn = conn
            except psycopg.Error as e:
                logger.warning("LISTEN unavailable (%s); polling the event log instead", type(e).__name__)
                self._listen_failed = True
        return self._listen_conn

    def wait_for_change(self, timeout: float) -> bool:
        """Block up to `timeout` s for a NOTIFY from an append (or, without LISTEN, a heads change)."""
        listener = self._listener()
        if listener is not None:
            try:
                for _ in listener.notifies(timeout=max(timeout, 0.0), stop_after=1):
                    return True
                return False
            except psycopg.OperationalError as e:
                logger.warning("lost the LISTEN connection (%s); polling the event log", e)
                self._close_listener()
                self._listen_failed = True
        return self._poll_heads(timeout)

    def _poll_heads(self, timeout: float) -> bool:
        deadline = time.monotonic() + max(timeout, 0.0)
        if self._seen_heads is None:
            self._seen_heads = self.heads()
        while True:
            heads = self.heads()
            if heads != self._seen_heads:
                self._seen_heads = heads
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(POLL_INTERVAL_S, remaining))

    def _close_listener(self) -> None:
        if self._listen_conn is not None:
            self._listen_conn.close()
            self._listen_conn = None

    def close(self) -> None:
        self._close_listener()
        with self._lock:
            self._conn.close()
