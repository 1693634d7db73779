"""The run directory's starts on disk (RocksDB through rocksdict), kept across restarts.

A worker restarted on its data dir reads only the records topic's tail: the database keeps, beside
the starts, the directory's progress (`run_directory.Progress`: how far it read each partition of
the records topic, and `seen` per log partition) and what it is a copy of (the cluster's and the
topic's ids). A copy of another topic (one deleted and recreated, another cluster's, a region's) is
wiped and rebuilt (`open_kept`, in ``directory_reader``).

Written without a write-ahead log. A crash then loses the writes RocksDB still held in memory, but
only ever a suffix of them: the database reopens as it was after one of its writes (one column
family, whose memtables are flushed in the order they were written). The progress is written after
the starts it covers, so it is never durable ahead of them: after a crash the reader reads again
from the kept progress, and a start read again is recognised by its key. A clean stop flushes.

Keys:
- a start: the engine run id's UTF-8 length (4 bytes), its bytes, then the start's log partition
  (4 bytes) and offset (8 bytes), so one prefix scan finds every start of an id. Value: the heads'
  length (4 bytes; all ones for none), the heads, then the record's bytes;
- where a start sits in the records topic (`_INDEX`, its partition and offset) -> the start's key,
  so the starts the topic no longer holds are found without a scan (`evict_below`);
- `_META` + a name: the progress and the copy's identity (JSON).
No engine run id is 4 GiB long, so neither of the last two prefixes begins a start's key.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olstream.streams.run_directory import DirectoryEntry, Progress

log = logging.getLogger(__name__)

_NO_HEADS = 0xFFFFFFFF
_INDEX = b"\xff\xff\xff\xfe"
_META = b"\xff\xff\xff\xff"
_PROGRESS = _META + b"progress"
_IDENTITY = _META + b"identity"
WRITE_BUFFER_BYTES = 16 << 20


def _prefix(engine_run_id: str) -> bytes:
    raw = engine_run_id.encode("utf-8")
    return len(raw).to_bytes(4, "big") + raw


def _index_key(topic_partition: int, topic_offset: int) -> bytes:
    return _INDEX + topic_partition.to_bytes(4, "big") + topic_offset.to_bytes(8, "big")


class DiskRunStarts:
    """`run_directory.RunStarts` in a RocksDB database at `path`, kept across restarts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        legacy = path.parent / "CURRENT"  # the database of a version that kept one for every topic
        if legacy.exists():
            shutil.rmtree(path.parent, ignore_errors=True)
        self._db = self._open()

    def _open(self) -> Any:
        from rocksdict import Options, Rdict, WriteOptions

        self.path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_write_buffer_size(WRITE_BUFFER_BYTES)
        db = Rdict(str(self.path), options)
        writes = WriteOptions()
        writes.disable_wal = True  # type: ignore[method-assign,assignment]  # a property; see the module
        db.set_write_options(writes)
        return db

    # ------------------------------------------------------------------ what the copy is

    @property
    def identity(self) -> str | None:
        raw = self._db.get(_IDENTITY)
        return None if raw is None else str(json.loads(raw))

    @property
    def progress(self) -> Progress:
        raw = self._db.get(_PROGRESS)
        if raw is None:
            return Progress({}, {}, 0)
        doc = json.loads(raw)
        return Progress(
            {int(p): int(o) for p, o in doc["read_to"].items()},
            {int(p): int(o) for p, o in doc["seen"].items()},
            int(doc["entries"]),
        )

    def reset(self, identity: str) -> None:
        """Wipe the copy and start one of `identity`."""
        self._db.close()
        shutil.rmtree(self.path, ignore_errors=True)
        self._db = self._open()
        self._db.put(_IDENTITY, json.dumps(identity).encode())

    # ------------------------------------------------------------------ RunStarts

    def put(self, engine_run_id: str, entry: DirectoryEntry, at: tuple[int, int] | None = None) -> bool:
        key = _prefix(engine_run_id) + entry.partition.to_bytes(4, "big") + entry.offset.to_bytes(8, "big")
        db = self._db
        if db.key_may_exist(key) and db.get(key) is not None:
            return False
        heads = entry.heads
        head = _NO_HEADS.to_bytes(4, "big") if heads is None else len(heads).to_bytes(4, "big") + heads
        db.put(key, head + entry.body)
        if at is not None:
            db.put(_index_key(*at), key)
        return True

    def get(self, engine_run_id: str) -> list[DirectoryEntry]:
        prefix = _prefix(engine_run_id)
        out: list[DirectoryEntry] = []
        for key, value in self._db.items(from_key=prefix):
            assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
            if not key.startswith(prefix) or len(key) != len(prefix) + 12:
                break
            partition = int.from_bytes(key[len(prefix) : len(prefix) + 4], "big")
            offset = int.from_bytes(key[len(prefix) + 4 :], "big")
            size = int.from_bytes(value[:4], "big")
            if size == _NO_HEADS:
                out.append(DirectoryEntry(partition, offset, value[4:], None))
            else:
                out.append(DirectoryEntry(partition, offset, value[4 + size :], value[4 : 4 + size]))
        return out

    def keep(self, progress: Progress) -> None:
        doc = {
            "read_to": {str(p): o for p, o in progress.read_to.items()},
            "seen": {str(p): o for p, o in progress.seen.items()},
            "entries": progress.entries,
        }
        self._db.put(_PROGRESS, json.dumps(doc, separators=(",", ":")).encode())

    def evict_below(self, lows: Mapping[int, int]) -> int:
        """Forget the starts at records-topic offsets below `lows` (per partition: what the topic no
        longer holds, so a directory rebuilt from it would not know them); how many were forgotten."""
        db = self._db
        evicted = 0
        for topic_partition, low in lows.items():
            start = _index_key(topic_partition, 0)
            end = _index_key(topic_partition, low)
            for key, value in db.items(from_key=start):
                assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
                if key >= end:
                    break
                db.delete(value)
                db.delete(key)
                evicted += 1
        return evicted

    def close(self) -> None:
        """Flush what is in memory (written without a write-ahead log) and close."""
        self._db.flush()
        self._db.close()
