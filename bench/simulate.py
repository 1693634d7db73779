"""Bench: how fast `olstream log simulate` writes into a fresh SQLite event log.

    .venv/bin/python bench/simulate.py [--runs 20000 100000] [--repeat 3] [--seed 1]

Prints one row per size: runs, records, seconds (wall), records/s (wall) and records/s per
CPU second of this process (the machine may be shared). The best of --repeat runs counts.
Goal (issue 2): >= 50,000 records/s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from olstream.eventlog.simulate import simulate  # noqa: E402
from olstream.eventlog.stores import open_store  # noqa: E402

GOAL = 50_000


def measure(runs: int, seed: int, partitions: int, workdir: Path, attempt: int) -> tuple[int, float, float]:
    """(records, wall seconds, CPU seconds) of one simulation into a fresh SQLite log."""
    url = f"sqlite:///{workdir}/bench-{runs}-{attempt}.db"
    store = open_store(url, partitions=partitions, create=True)
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        summary = simulate(store, runs, seed)
        return summary.records, time.perf_counter() - wall, time.process_time() - cpu
    finally:
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()
    header = f"{'runs':>8} {'records':>9} {'seconds':>8} {'records/s':>10} {'records/cpu-s':>14}"
    print(f"{header}  goal >= {GOAL:,}/s")
    ok = True
    with tempfile.TemporaryDirectory(prefix="olstream-bench-") as tmp:
        for runs in args.runs:
            results = [measure(runs, args.seed, args.partitions, Path(tmp), i) for i in range(args.repeat)]
            records, wall, cpu = min(results, key=lambda r: r[1])
            rate = records / wall
            ok = ok and rate >= GOAL
            print(f"{runs:>8} {records:>9} {wall:>8.2f} {rate:>10,.0f} {records / cpu:>14,.0f}")
    print("goal met" if ok else "goal NOT met on this machine (see records/cpu-s if it is shared)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
