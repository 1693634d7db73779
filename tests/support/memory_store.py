"""An in-memory EventLogStore for unit tests (same contract as the SQLite and PostgreSQL stores)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from olstream.eventlog.store import StoredRow


class MemoryEventLogStore:
    def __init__(self, partitions: int = 8) -> None:
        self.url = "memory:"
        self.rows: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.transactions = 0

    def partitions(self) -> list[int]:
        return sorted(self.rows)

    def read(self, partition: int, after_offset: int, limit: int) -> list[StoredRow]:
        start = after_offset + 1
        return [
            StoredRow(partition, start + i, b)
            for i, b in enumerate(self.rows[partition][start : start + limit])
        ]

    def heads(self) -> dict[int, int]:
        return {p: len(rows) - 1 for p, rows in self.rows.items()}

    def append(self, partition: int, build: Callable[[int], bytes]) -> int:
        return self.append_many([(partition, build)])[0]

    def append_many(self, items: Sequence[tuple[int, Callable[[int], bytes]]]) -> list[int]:
        staged: dict[int, list[bytes]] = {}
        offsets = []
        for partition, build in items:
            new = staged.setdefault(partition, [])
            offsets.append(len(self.rows[partition]) + len(new))
            new.append(build(offsets[-1]))
        for partition, new in staged.items():  # all builds succeeded: commit
            self.rows[partition].extend(new)
        self.transactions += 1
        return offsets

    def wait_for_change(self, timeout: float) -> bool:
        return False

    def close(self) -> None:
        pass

    def all_rows(self) -> list[StoredRow]:
        return [StoredRow(p, o, b) for p, rows in sorted(self.rows.items()) for o, b in enumerate(rows)]
