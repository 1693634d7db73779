"""Opens the event-log store a URL names (the factory, kept apart from the interface it returns)."""

from __future__ import annotations

from olstream.eventlog.store import EventLogStore
from olstream.shared.errors import ConfigError


def open_store(url: str, *, partitions: int | None = None, create: bool = False) -> EventLogStore:
    """Open the store a URL names: `sqlite:///path/events.db` or `postgresql://...`.

    With `create=True` a missing log is created with `partitions` partitions (default 8).
    """
    if url.startswith("sqlite:"):
        from olstream.eventlog.sqlite_store import SqliteEventLogStore

        return SqliteEventLogStore.open(url, partitions=partitions, create=create)
    if url.startswith(("postgresql:", "postgres:")):
        from olstream.eventlog.postgres_store import PostgresEventLogStore

        return PostgresEventLogStore.open(url, partitions=partitions, create=create)
    raise ValueError(f"unsupported event-log URL {url!r}: use sqlite:///path or postgresql://...")


def open_existing_store(url: str) -> EventLogStore:
    """`open_store` for a command that reads an existing log (`errors redrive --log`, `explain --log`):
    a URL or log that cannot be opened is one `ConfigError` (printed redacted), not a traceback."""
    import sqlite3

    import psycopg

    try:
        return open_store(url)
    except (ValueError, OSError, sqlite3.Error, psycopg.Error) as e:
        raise ConfigError(f"cannot open the event log: {e}") from e
