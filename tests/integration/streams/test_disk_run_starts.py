"""The run directory's starts on disk (RocksDB) answer as the in-memory ones do."""

from __future__ import annotations

from pathlib import Path

import pytest

from olstream.streams.run_directory import DirectoryEntry, MemoryRunStarts
from olstream.streams.runtime.disk_run_starts import DiskRunStarts

pytestmark = pytest.mark.integration


def test_disk_and_memory_starts_agree_and_a_reopened_database_is_empty(tmp_path: Path) -> None:
    disk, memory = DiskRunStarts(tmp_path / "starts"), MemoryRunStarts()
    entries = [
        ("run", DirectoryEntry(0, 5, b"\xc3\x01body", b"0:5,1:9")),
        ("run", DirectoryEntry(1, 7, b"\xc3\x01other", None)),
        ("run", DirectoryEntry(0, 5, b"\xc3\x01body", b"0:5,1:9")),  # read again
        ("run2", DirectoryEntry(2, 1, b"", b"")),
        ("r", DirectoryEntry(3, 1, b"x", None)),  # a prefix of "run": not one of its starts
        ("ünï\x00code", DirectoryEntry(4, 2**40, b"y", b"4:1")),
    ]
    for rid, entry in entries:
        assert disk.put(rid, entry) == memory.put(rid, entry), (rid, entry)
    for rid in ("run", "run2", "r", "ünï\x00code", "missing", "ru"):
        key = lambda e: (e.partition, e.offset)  # noqa: E731
        assert sorted(disk.get(rid), key=key) == sorted(memory.get(rid), key=key), rid
    disk.close()
    assert DiskRunStarts(tmp_path / "starts").get("run") == [], "rebuilt from the topic on every start"
