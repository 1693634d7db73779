"""The run directory's starts on disk (RocksDB): they answer as the in-memory ones do, outlive the
process, and a crash never leaves the kept progress ahead of the starts it covers."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olstream.streams.run_directory import DirectoryEntry, MemoryRunStarts, Progress
from olstream.streams.runtime.disk_run_starts import DiskRunStarts
from tests.support.stream_support import env

pytestmark = pytest.mark.integration


def test_disk_and_memory_starts_agree_and_outlive_the_process(tmp_path: Path) -> None:
    disk, memory = DiskRunStarts(tmp_path / "starts"), MemoryRunStarts()
    entries = [
        ("run", DirectoryEntry(0, 5, b"\xc3\x01body", b"0:5,1:9")),
        ("run", DirectoryEntry(1, 7, b"\xc3\x01other", None)),
        ("run", DirectoryEntry(0, 5, b"\xc3\x01body", b"0:5,1:9")),  # read again
        ("run2", DirectoryEntry(2, 1, b"", b"")),
        ("r", DirectoryEntry(3, 1, b"x", None)),  # a prefix of "run": not one of its starts
        ("ünï\x00code", DirectoryEntry(4, 2**40, b"y", b"4:1")),
    ]
    for i, (rid, entry) in enumerate(entries):
        assert disk.put(rid, entry, (0, i)) == memory.put(rid, entry), (rid, entry)
    disk.keep(Progress({0: 6}, {0: 5, 1: 7, 2: 1, 3: 1, 4: 2**40}, 5))
    key = lambda e: (e.partition, e.offset)  # noqa: E731
    for rid in ("run", "run2", "r", "ünï\x00code", "missing", "ru"):
        assert sorted(disk.get(rid), key=key) == sorted(memory.get(rid), key=key), rid
    disk.close()

    reopened = DiskRunStarts(tmp_path / "starts")
    assert sorted(reopened.get("run"), key=key) == sorted(memory.get("run"), key=key)
    assert reopened.progress == Progress({0: 6}, {0: 5, 1: 7, 2: 1, 3: 1, 4: 2**40}, 5)

    # what the topic no longer holds (offsets below its low watermark) is forgotten
    assert reopened.evict_below({0: 2}) == 2  # offsets 0 and 1; offset 2 was a re-read, not kept
    assert reopened.get("run") == []
    assert reopened.get("run2") == [DirectoryEntry(2, 1, b"", b"")]
    assert reopened.evict_below({0: 2}) == 0

    reopened.reset("cluster/another-topic-id")
    assert reopened.identity == "cluster/another-topic-id"
    assert reopened.get("run2") == [] and reopened.progress == Progress({}, {}, 0)
    reopened.close()


WRITER = """
import sys
from pathlib import Path
from olstream.streams.run_directory import DirectoryEntry, Progress
from olstream.streams.runtime.disk_run_starts import DiskRunStarts

starts = DiskRunStarts(Path(sys.argv[1]))
body = b"x" * 300
offset = starts.progress.read_to.get(0, 0)
print("ready", flush=True)
while True:  # batches of 500 starts, then the progress that covers them, until killed
    for o in range(offset, offset + 500):
        starts.put(f"run-{o}", DirectoryEntry(1, o, body, None), (0, o))
    offset += 500
    starts.keep(Progress({0: offset}, {1: offset - 1}, offset))
"""


def test_a_killed_writer_never_leaves_its_progress_ahead_of_its_starts(tmp_path: Path) -> None:
    path = tmp_path / "starts"
    kept: list[int] = []
    for run in range(5):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, env=env(), cwd=Path.cwd()
        )
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        time.sleep(1.5 + 0.3 * run)  # several 16 MiB write buffers: some flushed, one in memory
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        starts = DiskRunStarts(path)
        progress = starts.progress
        read_to = progress.read_to.get(0, 0)
        kept.append(read_to)
        assert progress.entries == read_to and progress.seen.get(1, -1) == read_to - 1
        for o in range(0, read_to, 97):
            assert starts.get(f"run-{o}"), f"run {run}: the progress covers offset {o}, its start is lost"
        if read_to:
            assert starts.get(f"run-{read_to - 1}"), f"run {run}: the last start the progress covers is lost"
        starts.close()
    assert kept[-1] > 0, f"nothing was ever kept across five kills: {kept}"
    assert kept == sorted(kept), f"the kept progress went back: {kept}"
