"""Bench: the run directory's memory and speed at up to a million runs (no Kafka).

    .venv/bin/python bench/run_directory.py [--runs 250000 1000000] [--partitions 12]

Builds RunStarted records shaped like the simulator's (a UUID engine run id, a child in three with
a parent named only by engine run id on another log partition, the source's heads on each), adds them
to a `RunDirectory` as the worker's reader does, and prints per size: the resident memory the
directory added, bytes per run, how fast runs were registered, and how fast children resolved
their parents. Each size runs in a fresh process, so one size's memory does not hide in another's.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from olstream.contract import codec, wire  # noqa: E402
from olstream.contract.records import RunRef, RunStarted  # noqa: E402
from olstream.streams.mapping import MappingConfig  # noqa: E402
from olstream.streams.processor import parent_resolver  # noqa: E402
from olstream.streams.run_directory import (  # noqa: E402
    DirectoryLookup,
    MemoryRunStarts,
    RunDirectory,
    start_position,
)
from olstream.streams.runid import epoch_millis  # noqa: E402
from olstream.streams.runtime.disk_run_starts import DiskRunStarts  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(runs: int, partitions: int, disk: bool) -> dict[str, float]:
    ids = [str(uuid.UUID(int=(i * 0x9E3779B97F4A7C15) % (1 << 128), version=4)) for i in range(runs)]
    offsets = [0] * partitions
    heads: dict[int, int] = {}
    before = rss_mib()
    work = Path(tempfile.mkdtemp(prefix="olstream-bench-directory-"))
    directory = RunDirectory(starts=DiskRunStarts(work / "starts") if disk else MemoryRunStarts())
    started = time.perf_counter()
    children: list[RunStarted] = []
    batch = []
    round_: list[RunStarted] = []
    for i, rid in enumerate(ids):
        p = i % partitions
        at = T0 + timedelta(milliseconds=i)
        parent = RunRef(ids[i - 1]) if i % 3 == 2 else None  # the previous run: another log partition
        wf = f"workflow_{i % 40}"
        record = RunStarted(p, offsets[p], at, rid, "t-7", "acme", wf, "3", f"i{i}", at, "svc", parent=parent)
        offsets[p] += 5  # four more records of the run follow it in its log partition
        heads[p] = record.offset
        round_.append(record)
        if parent is not None and len(children) < 20_000:
            children.append(record)
        if p == partitions - 1 or i == runs - 1:
            # the source reads a round of rows, then the heads: the round's starts share them
            raw_heads = wire.encode_heads(heads)
            batch.extend(start_position(r.partition, r.offset, codec.encode(r), raw_heads) for r in round_)
            round_ = []
        if len(batch) >= 2000:
            directory.add(batch)
            batch = []
    directory.add(batch)
    add_seconds = time.perf_counter() - started
    after = rss_mib()
    resolve = parent_resolver(MappingConfig(), 1 << 30)
    started = time.perf_counter()
    found = 0
    for child in children:
        raw = directory.starts_of(child.engine_run_id)[0].heads
        heads_of = None if raw is None else wire.decode_heads(raw)
        lookup = DirectoryLookup(
            directory, resolve, child.partition, child.offset, heads_of, epoch_millis(child.append_time)
        )
        assert child.parent is not None
        found += lookup(child.parent.engine_run_id) is not None
    lookup_seconds = time.perf_counter() - started
    assert found == len(children), f"{found} of {len(children)} parents found"
    shutil.rmtree(work, ignore_errors=True)
    return {
        "runs": runs,
        "rss_mib": after - before,
        "bytes_per_run": (after - before) * 1024 * 1024 / runs,
        "registered_per_s": runs / add_seconds,
        "lookups_per_s": len(children) / lookup_seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[250_000, 1_000_000])
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store", choices=("disk", "memory"), default="disk", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.partitions, args.store == "disk")))
        return 0
    print(
        f"{'starts kept':>12} {'runs':>10} {'directory RSS':>14} {'bytes/run':>10} {'registered/s':>13} "
        f"{'lookups/s':>10}"
    )
    for store, runs in ((store, runs) for store in ("disk", "memory") for runs in args.runs):
        cmd = [sys.executable, __file__, "--one", str(runs), "--partitions", str(args.partitions)]
        done = subprocess.run([*cmd, "--store", store], capture_output=True, text=True, check=True)
        r = json.loads(done.stdout)
        where = "on disk" if store == "disk" else "in memory"
        print(
            f"{where:>12} {r['runs']:>10,} {r['rss_mib']:>10.0f} MiB {r['bytes_per_run']:>10.0f} "
            f"{r['registered_per_s']:>13,.0f} {r['lookups_per_s']:>10,.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
