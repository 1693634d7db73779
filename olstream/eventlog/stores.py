"""Opens the event-log store a URL names (the factory, kept apart from the interface it returns)."""

from __future__ import annotations

from olstream.eventlog.store import EventLogStore


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
