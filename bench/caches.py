"""Bench: how often the worker's two caches miss, by size (no Kafka).

    .venv/bin/python bench/caches.py [--runs 100000] [--partitions 6] [--seed 3]
        [--state-sizes 2000 5000 20000] [--parent-sizes 1000 5000 50000]

A seeded simulated workload is applied in append-time order, as one worker sees it:

- decoded run states (`RunTable.cache`, `WorkerSettings.state_cache_size`): the pure step
  (`processor.apply`) reads states through a batch overlay (1,500 records, about one 0.25 s
  checkpoint) and an LRU cache of the given size, in front of a dict standing for RocksDB. Printed:
  how many lookups reached the store, and how many of them found a state there (a miss the cache
  could have served);
- resolved parents (`run_directory.RESOLVED_CACHE_SIZE`): every RunStarted is registered in a run
  directory as the worker's reader does, and each child looks up its parent (and root) with the
  log's heads at its append. Printed: how many parents were resolved (a resolution decodes the
  parent's start and renders its START; the cache spares repeats).

A cache size only matters where these counts differ.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from olstream.contract import codec, wire  # noqa: E402
from olstream.contract.records import Record, RunStarted  # noqa: E402
from olstream.eventlog.simulate import simulate  # noqa: E402
from olstream.streams import run_directory as rd  # noqa: E402
from olstream.streams import state as st  # noqa: E402
from olstream.streams.processor import apply, parent_resolver  # noqa: E402
from olstream.streams.runid import epoch_millis  # noqa: E402
from olstream.streams.settings import WorkerSettings  # noqa: E402
from tests.support.memory_store import MemoryEventLogStore  # noqa: E402

BATCH_RECORDS = 1_500


def state_reads(records: list[Record], size: int) -> tuple[int, int, int]:
    """(records applied, lookups that reached the store, of them found there) with a cache of `size`."""
    cfg = WorkerSettings().mapping
    table: dict[str, st.RunState | None] = {}
    cache: OrderedDict[str, st.RunState] = OrderedDict()
    overlay: dict[str, st.RunState | None] = {}
    reads = found = applied = 0

    def keep(key: str, state: st.RunState) -> None:
        cache[key] = state
        cache.move_to_end(key)
        if len(cache) > size:
            cache.popitem(last=False)

    def lookup(key: str) -> st.RunState | None:
        nonlocal reads, found
        if key in overlay:
            return overlay[key]
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        reads += 1
        state = table.get(key)
        if state is not None:
            found += 1
            keep(key, state)
        return state

    for record in records:
        try:
            step = apply(record, cfg, lookup, record.partition)
        except st.StreamInputError:
            continue
        applied += 1
        if step.write is not None:
            overlay[step.key] = step.write
        if applied % BATCH_RECORDS == 0:  # the checkpoint writes the batch and remembers what it wrote
            for key, state in overlay.items():
                table[key] = state
                if state is None:
                    cache.pop(key, None)
                else:
                    keep(key, state)
            overlay.clear()
    return applied, reads, found


def parent_resolutions(records: list[Record], size: int) -> tuple[int, int, float]:
    """(children, parents resolved, seconds of lookups) with a resolved-parent cache of `size`."""
    rd.RESOLVED_CACHE_SIZE = size
    resolve_one = parent_resolver(WorkerSettings().mapping, 1_000_000)
    resolved = 0

    def resolve(record: RunStarted, lookup: st.Lookup) -> st.RunState | None:
        nonlocal resolved
        resolved += 1
        return resolve_one(record, lookup)

    directory = rd.RunDirectory()
    children = 0
    seconds = 0.0
    for record in records:
        heads = dict(directory.seen)
        if isinstance(record, RunStarted):
            body = codec.encode(record)
            raw_heads = wire.encode_heads(heads) if heads else None
            directory.add([rd.start_position(record.partition, record.offset, body, raw_heads)])
        else:
            directory.add([rd.Position(record.partition, record.offset)])
        if isinstance(record, RunStarted) and record.parent is not None:
            children += 1
            started = time.process_time()
            lookup = rd.DirectoryLookup(
                directory, resolve, record.partition, record.offset, heads, epoch_millis(record.append_time)
            )
            lookup(record.parent.engine_run_id)
            if record.root is not None:
                lookup(record.root.engine_run_id)
            seconds += time.process_time() - started
    return children, resolved, seconds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--state-sizes", type=int, nargs="+", default=[2_000, 5_000, 20_000])
    parser.add_argument("--parent-sizes", type=int, nargs="+", default=[1_000, 5_000, 50_000])
    args = parser.parse_args()
    store = MemoryEventLogStore(args.partitions)
    simulate(store, args.runs, seed=args.seed)
    records = [codec.decode(r.payload, r.partition, r.offset) for r in store.all_rows()]
    records.sort(key=lambda r: (r.append_time, r.partition, r.offset))
    print(f"{len(records):,} records of {args.runs:,} simulated runs in {args.partitions} log partitions")
    print()
    print("| decoded-state cache | records applied | lookups reaching the store | of them found there |")
    print("|---:|---:|---:|---:|")
    for size in args.state_sizes:
        applied, reads, found = state_reads(records, size)
        print(f"| {size:,} | {applied:,} | {reads:,} | {found:,} |")
    print()
    print("| resolved-parent cache | children | parents resolved | lookup CPU µs per child |")
    print("|---:|---:|---:|---:|")
    for size in args.parent_sizes:
        children, resolved, seconds = parent_resolutions(records, size)
        print(f"| {size:,} | {children:,} | {resolved:,} | {seconds / max(children, 1) * 1e6:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
