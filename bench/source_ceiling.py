"""Bench: how close can any producer of the wire contract get to the plain produce loop?

    .venv/bin/python bench/source_ceiling.py [--records 1000000] [--bootstrap 127.0.0.1:19092]

Builds (or reuses) a simulated SQLite log like ``bench/source.py`` and, to the same broker in
the same run, produces its rows three ways with confluent-kafka (idempotent, acks=all): the
plain loop of keys and values (the limit of issue 3), the same loop adding only the contract's
four headers, and that header loop split over two processes by log partition (started together;
wall time from the first start to the last acknowledgement). No connector logic at all: this is
the ceiling of the source connector's share of the limit on this machine.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import source as bench_source  # noqa: E402


def _child(bootstrap: str, rows: list[Any], queue: Any, go: Any) -> None:
    go.wait()
    started = time.perf_counter()
    _, cpu = bench_source.raw_produce(bootstrap, rows, with_headers=True)
    queue.put((started, time.perf_counter(), cpu))


def parallel_headers(bootstrap: str, rows: list[Any], processes: int) -> tuple[float, float]:
    """(wall s, CPU s) of producing the rows with headers from several processes at once."""
    ctx = mp.get_context("fork")
    queue, go = ctx.Queue(), ctx.Event()
    parts = [[r for r in rows if int(r[0]) % processes == i] for i in range(processes)]
    children = [ctx.Process(target=_child, args=(bootstrap, part, queue, go)) for part in parts]
    for child in children:
        child.start()
    time.sleep(3)  # producers connected
    go.set()
    results = [queue.get() for _ in children]
    for child in children:
        child.join()
    return max(r[1] for r in results) - min(r[0] for r in results), sum(r[2] for r in results)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--bootstrap",
        default=os.environ.get(
            "OLSTREAM_KAFKA_BOOTSTRAP", os.environ.get("OLSTREAM_BOOTSTRAP", "127.0.0.1:19092")
        ),
    )
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--log", default=None, help="SQLite log to reuse (built when missing)")
    args = ap.parse_args()
    log = args.log or str(Path(tempfile.gettempdir()) / f"olstream-bench-ceiling-{args.records}.db")
    url = f"sqlite:///{log}"
    bench_source.build_log(url, args.records)
    rows = bench_source.load_rows(url)
    plain, plain_cpu = bench_source.raw_produce(args.bootstrap, rows, with_headers=False)
    time.sleep(3)
    headers, headers_cpu = bench_source.raw_produce(args.bootstrap, rows, with_headers=True)
    time.sleep(3)
    two, two_cpu = parallel_headers(args.bootstrap, rows, 2)
    n = len(rows)
    print(f"{n:,} records, {os.cpu_count()} CPUs\n")
    print("| producer | wall s | records/s | % of plain | CPU s |")
    print("|---|---:|---:|---:|---:|")
    for name, wall, cpu in (
        ("plain produce loop (key, value): the limit", plain, plain_cpu),
        ("+ the contract's 4 headers, 1 process", headers, headers_cpu),
        ("+ the contract's 4 headers, 2 processes", two, two_cpu),
    ):
        print(f"| {name} | {wall:.2f} | {n / wall:,.0f} | {100 * plain / wall:.0f}% | {cpu:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
