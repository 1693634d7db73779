"""Bench: how many simulated child runs keep their parent edge, per job-name mode (no Kafka).

    .venv/bin/python bench/parent_edges.py [--runs 2000] [--seed 11] [--partitions 6 8]

Runs the simulator's records through the worker's pure mapping (`olstream.streams.processor.apply`, the
records of each log partition in order, partitions interleaved) over a run directory holding every
log partition, with the heads a source reading the finished log puts on each RunStarted, and counts
the child runs whose parent is in the log and those whose START carries a parent facet. Output does
not depend on the interleaving: the directory's answer is a function of the log.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from olstream.contract import codec, wire  # noqa: E402
from olstream.contract.records import RunStarted  # noqa: E402
from olstream.eventlog.simulate import simulate  # noqa: E402
from olstream.streams.mapping import MappingConfig  # noqa: E402
from olstream.streams.processor import apply, parent_resolver  # noqa: E402
from olstream.streams.run_directory import DirectoryLookup, Position, RunDirectory, start_position  # noqa: E402
from olstream.streams.runid import epoch_millis  # noqa: E402
from olstream.streams.state import RunState  # noqa: E402
from tests.support.memory_store import MemoryEventLogStore  # noqa: E402


def count(runs: int, seed: int, partitions: int, job_names: str) -> tuple[int, int, int]:
    """(child runs, children whose parent is in the log, child runs emitted with a parent facet)."""
    store = MemoryEventLogStore(partitions)
    simulate(store, runs, seed)
    cfg = MappingConfig(job_names=job_names)
    rows = sorted(store.all_rows(), key=lambda r: (r.offset, r.partition))
    heads: dict[int, int] = {}
    for row in rows:
        heads[row.partition] = max(row.offset, heads.get(row.partition, -1))
    records = [codec.decode(row.payload, row.partition, row.offset) for row in rows]
    raw_heads = wire.encode_heads(heads)
    directory = RunDirectory()
    directory.add(
        start_position(row.partition, row.offset, row.payload, raw_heads)
        if isinstance(record, RunStarted)
        else Position(row.partition, row.offset)
        for row, record in zip(rows, records, strict=True)
    )
    started = {r.engine_run_id for r in records if isinstance(r, RunStarted)}
    resolve = parent_resolver(cfg, 1 << 30)
    table: dict[str, RunState] = {}
    children = in_log = with_edge = 0
    for record in records:
        parents = None
        if isinstance(record, RunStarted):
            ms = epoch_millis(record.append_time)
            parents = DirectoryLookup(directory, resolve, record.partition, record.offset, heads, ms)
        step = apply(record, cfg, table.get, 0, parents)
        if step.write is not None:
            table[step.key] = step.write
        if isinstance(record, RunStarted) and record.parent is not None and step.outputs:
            children += 1
            in_log += record.parent.engine_run_id in started
            with_edge += "parent" in json.loads(step.outputs[0].value)["run"]["facets"]
    return children, in_log, with_edge


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--partitions", type=int, nargs="+", default=[6, 8])
    args = parser.parse_args()
    print(
        f"{'log partitions':>14} {'job names':>12} {'children':>9} {'parent in log':>14} "
        f"{'with parent edge':>17} {'without':>8}"
    )
    for partitions in args.partitions:
        for mode in ("hierarchical", "flat"):
            children, in_log, with_edge = count(args.runs, args.seed, partitions, mode)
            without = children - with_edge
            print(
                f"{partitions:>14} {mode:>12} {children:>9} {in_log:>14} {with_edge:>17} "
                f"{without:>4} ({100 * without / max(children, 1):.0f}%)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
