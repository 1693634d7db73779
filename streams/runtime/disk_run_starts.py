"""The run directory's starts on disk (RocksDB through rocksdict), so a worker's memory stays flat.

The worker rebuilds the directory from the records topic on every start, so the database is
wiped when opened and written without a write-ahead log. Key: the engine run id's UTF-8 length
(4 bytes), its bytes, then the start's log partition (4 bytes) and offset (8 bytes), so one prefix
scan finds every start of an id. Value: the heads' length (4 bytes; all ones for none), the heads,
then the record's bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from olstream.streams.run_directory import DirectoryEntry

_NO_HEADS = 0xFFFFFFFF
WRITE_BUFFER_BYTES = 16 << 20


def _prefix(engine_run_id: str) -> bytes:
    raw = engine_run_id.encode("utf-8")
    return len(raw).to_bytes(4, "big") + raw


class DiskRunStarts:
    """`run_directory.RunStarts` in a RocksDB database at `path` (wiped when opened)."""

    def __init__(self, path: Path) -> None:
        from rocksdict import Options, Rdict, WriteOptions

        shutil.rmtree(path, ignore_errors=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_write_buffer_size(WRITE_BUFFER_BYTES)
        self._db = Rdict(str(path), options)
        writes = WriteOptions()
        writes.disable_wal = True  # type: ignore[method-assign,assignment]  # a property; rebuilt anyway
        self._db.set_write_options(writes)

    def put(self, engine_run_id: str, entry: DirectoryEntry) -> bool:
        key = _prefix(engine_run_id) + entry.partition.to_bytes(4, "big") + entry.offset.to_bytes(8, "big")
        db = self._db
        if db.key_may_exist(key) and db.get(key) is not None:
            return False
        heads = entry.heads
        head = _NO_HEADS.to_bytes(4, "big") if heads is None else len(heads).to_bytes(4, "big") + heads
        db.put(key, head + entry.body)
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

    def close(self) -> None:
        self._db.close()
