"""Benchmark of `olstream sink` against a local receiver, in one run; two workloads.

uniform (20,000 events of 5,000 runs on 500 distinct keys, a 4-partition topic, a fast receiver;
the rows other than the sink and the 16-connection loop take the first --slow-events, 4,000):
- olstream sink: Kafka topic -> `olstream sink --until-idle` (a real process) -> receiver;
- openlineage-python: its HttpTransport.emit() in a loop (how OpenLineage clients send);
- raw loops without Kafka: aiohttp keep-alive with the sink's concurrency (the limit) and on one
  connection; with --httpx also httpx sync Client in threads and httpx AsyncClient (the
  candidates the sink's client was chosen from).

skewed (realistic: 1,500 runs in run trees, a START and a COMPLETE each = 3,000 events, keyed
`run:{namespace}/{root job}` by the tree's root job over 20 root jobs with seeded Zipf weights, so
one hot key carries the largest share; header olstream.run_id on every event; a 6-partition
topic; a receiver answering after a fixed --latency-ms, default 10):
- olstream sink at --concurrency (rate first to last request at the receiver, and including
  process start-up and the group join);
- the raw aiohttp keep-alive loop, --concurrency connections pulling from one queue (the limit);
- openlineage-python's HttpTransport.emit in --concurrency threads (its client is synchronous),
  and on 1 thread (the uniform row's way) over the first --ol-single-events events.
Every row also counts, at the receiver, per-run order violations (runs whose COMPLETE arrived
before their START) and early runs (COMPLETE arrived after the START, before its answer).

running (issue 29; not part of `both`, whose rows stay without RUNNING events): the worker's own
events for a simulated log of --runs runs (the pure step over every record, seed --seed), once with
RUNNING events off and once on, each through `olstream sink` into the --latency-ms receiver: events
per run, sink events/s and the runs/s they amount to.

Each row reports its best of --repeat interleaved rounds (the host is shared and noisy).

Usage: .venv/bin/python bench/sink.py [--workload uniform|skewed|running|both] [--bootstrap 127.0.0.1:19092]
       [--events 20000] [--runs 1500] [--concurrency 16] [--repeat 3] [--httpx] [--sink-root DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.sink_events import (  # noqa: E402
    LineageRecord,
    RunOrder,
    make_events,
    make_run_trees,
    produce,
    run_order,
    zipf_weights,
)

HEADERS = {"Content-Type": "application/json"}


class FastReceiver:
    """`python -m tests.support.receiver` in its own process; `stats()` = (count, seconds first..last)."""

    def __init__(self, latency_ms: float = 0.0, track_runs: bool = False) -> None:
        options = ["--latency-ms", str(latency_ms)] if latency_ms else []
        options += ["--track-runs"] if track_runs else []
        self.first = 0.0  # monotonic time of the first request of the last stats() (system-wide clock)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.receiver", *options],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.stdin: IO[str] = self.proc.stdin
        self.stdout: IO[str] = self.proc.stdout
        self.port = json.loads(self.stdout.readline())["port"]
        self.url = f"http://127.0.0.1:{self.port}"

    def stats(self) -> tuple[int, float]:
        self.stdin.write("stats\n")
        self.stdin.flush()
        doc = json.loads(self.stdout.readline())
        self.first = float(doc["first"])
        return int(doc["count"]), float(doc["last"] - doc["first"])

    def arrivals(self) -> list[tuple[str, str, float, float]]:
        """(runId, eventType, received_at, answered_at) of each event since the last call, in arrival
        order (--track-runs)."""
        self.stdin.write("runs\n")
        self.stdin.flush()
        return [(r, t, float(a), float(b)) for r, t, a, b in json.loads(self.stdout.readline())["arrivals"]]

    def reset(self) -> None:
        self.stats()
        self.arrivals()

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait(10)


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def sink_command(sink_root: Path | None) -> tuple[list[str], dict[str, str], Path]:
    """How to start `olstream sink`: this checkout's, or (--sink-root) another checkout's package."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENLINEAGE_")}
    if sink_root is None:
        return [str(ROOT / ".venv" / "bin" / "olstream")], env, ROOT
    env["PYTHONPATH"] = os.pathsep.join([str(sink_root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return [sys.executable, "-m", "olstream"], env, sink_root


def bench_sink(
    bootstrap: str,
    receiver: FastReceiver,
    events: list[LineageRecord],
    concurrency: int,
    partitions: int = 4,
    sink_root: Path | None = None,
) -> tuple[float, float, float, int]:
    """(events/s at the receiver between first and last request, events/s over the process's wall
    time, seconds from the process's start to the first request, posts beyond the events: the
    repeats of job versions). Rates count events, not posts: a repeat is overhead."""
    from olstream.shared.kafka_admin import ensure_topic

    topic = f"bench.sink.{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, events)
    receiver.stats()
    command, env, cwd = sink_command(sink_root)
    started = time.monotonic()
    rc = subprocess.call(
        [
            *command,
            "sink",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--group",
            f"bench-{uuid.uuid4().hex[:8]}",
            "--url",
            receiver.url,
            "--until-idle",
            "--concurrency",
            str(concurrency),
            "--dlq-topic",
            f"{topic}.dlq",
            "--log-level",
            "WARNING",
        ],
        env=env,
        cwd=cwd,
    )
    wall = time.monotonic() - started
    count, span = receiver.stats()
    if rc != 0 or count < len(events):
        raise SystemExit(f"sink failed: rc={rc}, delivered {count} of {len(events)}")
    return rate(len(events), span), rate(len(events), wall), receiver.first - started, count - len(events)


def bench_openlineage_python(receiver: FastReceiver, docs: list[dict[str, Any]]) -> float:
    from openlineage.client.transport.http import HttpConfig, HttpTransport

    transport = HttpTransport(HttpConfig.from_dict({"url": receiver.url, "endpoint": "api/v1/lineage"}))
    receiver.stats()
    for doc in docs:
        transport.emit(doc)  # type: ignore[arg-type]
    return rate(*receiver.stats())


def bench_openlineage_threads(receiver: FastReceiver, docs: list[dict[str, Any]], threads: int) -> float:
    """HttpTransport.emit in `threads` threads, one transport (requests Session) each, pulling the
    events in order from one shared iterator."""
    from openlineage.client.transport.http import HttpConfig, HttpTransport

    config = {"url": receiver.url, "endpoint": "api/v1/lineage"}
    transports = [HttpTransport(HttpConfig.from_dict(config)) for _ in range(threads)]
    pending = iter(docs)
    lock = threading.Lock()

    def loop(transport: HttpTransport) -> None:
        while True:
            with lock:
                doc = next(pending, None)
            if doc is None:
                return
            transport.emit(doc)  # type: ignore[arg-type]

    receiver.stats()
    workers = [threading.Thread(target=loop, args=(t,)) for t in transports]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for t in transports:
        t.close()
    return rate(*receiver.stats())


def bench_aiohttp(
    receiver: FastReceiver, bodies: list[bytes], connections: int, shared: bool = False
) -> float:
    """`connections` keep-alive loops; each sends its own slice of the bodies (`bodies[i::n]`), or,
    with `shared`, the next body of one queue (the order a concurrent sender would take them in)."""
    import aiohttp

    async def run() -> None:
        connector = aiohttp.TCPConnector(limit=connections)
        async with aiohttp.ClientSession(connector=connector) as session:
            url = receiver.url + "/api/v1/lineage"
            queue = iter(bodies)
            chunks = (
                [queue] * connections
                if shared
                else [iter(bodies[i::connections]) for i in range(connections)]
            )

            async def loop(chunk: Iterator[bytes]) -> None:
                for body in chunk:
                    async with session.post(url, data=body, headers=HEADERS) as response:
                        await response.read()

            await asyncio.gather(*(loop(c) for c in chunks))

    receiver.stats()
    asyncio.run(run())
    return rate(*receiver.stats())


def bench_httpx_threads(receiver: FastReceiver, bodies: list[bytes], threads: int) -> float:
    import httpx

    url = receiver.url + "/api/v1/lineage"

    def loop(chunk: list[bytes]) -> None:
        with httpx.Client() as client:
            for body in chunk:
                client.post(url, content=body, headers=HEADERS)

    receiver.stats()
    workers = [threading.Thread(target=loop, args=(bodies[i::threads],)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return rate(*receiver.stats())


def bench_httpx_async(receiver: FastReceiver, bodies: list[bytes], connections: int) -> float:
    import httpx

    async def run() -> None:
        limits = httpx.Limits(max_connections=connections)
        async with httpx.AsyncClient(limits=limits) as client:
            url = receiver.url + "/api/v1/lineage"

            async def loop(chunk: list[bytes]) -> None:
                for body in chunk:
                    await client.post(url, content=body, headers=HEADERS)

            await asyncio.gather(*(loop(bodies[i::connections]) for i in range(connections)))

    receiver.stats()
    asyncio.run(run())
    return rate(*receiver.stats())


def run_uniform(args: argparse.Namespace) -> bool:
    """Today's row: 500 distinct keys, a fast receiver. Prints its table; True when its goal is met."""
    events = make_events(runs=args.events // 4, events_per_run=4, jobs=500)
    bodies = [e.value for e in events]
    few = bodies[: args.slow_events]
    docs = [json.loads(b) for b in few]
    receiver = FastReceiver()
    c = args.concurrency
    candidates: list[tuple[str, Callable[[], float]]] = [
        (f"raw aiohttp keep-alive loop, {c} connections (limit)", lambda: bench_aiohttp(receiver, bodies, c)),
        ("raw aiohttp keep-alive loop, 1 connection", lambda: bench_aiohttp(receiver, few, 1)),
    ]
    if args.httpx:  # the candidates the sink's HTTP client was chosen from (docs/benchmarks.md)
        candidates += [
            ("raw httpx sync Client, 1 thread", lambda: bench_httpx_threads(receiver, few, 1)),
            ("raw httpx sync Client, 4 threads", lambda: bench_httpx_threads(receiver, few, 4)),
            (f"raw httpx AsyncClient, {c} connections", lambda: bench_httpx_async(receiver, few, c)),
            ("raw httpx AsyncClient, 1 connection", lambda: bench_httpx_async(receiver, few, 1)),
        ]
    ol_row = ("openlineage-python HttpTransport.emit", lambda: bench_openlineage_python(receiver, docs))
    candidates.append(ol_row)
    best: dict[str, float] = {}
    try:
        for round_no in range(args.repeat):  # interleaved rounds, best of each: the host is shared
            sink_rate, sink_wall, _, _ = bench_sink(args.bootstrap, receiver, events, c, 4, args.sink_root)
            measured = [
                (f"olstream sink (Kafka -> HTTP, concurrency {c})", sink_rate),
                ("olstream sink incl. start-up and group join", sink_wall),
            ]
            for name, fn in candidates:
                measured.append((name, fn()))
                print(f"  uniform round {round_no + 1}: {name}: {measured[-1][1]:,.0f} ev/s", file=sys.stderr)
            for name, value in measured:
                best[name] = max(best.get(name, 0.0), value)
    finally:
        receiver.close()
    rows = list(best.items())
    limit = rows[2][1]
    ol = next(r for n, r in rows if n.startswith("openlineage-python"))
    slow = f"{args.slow_events} for 1 connection, {'httpx and ' if args.httpx else ''}openlineage-python"
    print(f"\nuniform: best of {args.repeat} rounds, {args.events} events ({slow})")
    print(f"{'path':<62} {'events/s':>10} {'vs limit':>9} {'vs OL-py':>9}")
    for name, value in rows:
        print(f"{name:<62} {value:>10,.0f} {value / limit:>8.0%} {value / ol:>8.1f}x")
    ok = rows[0][1] >= 5 * ol and rows[0][1] >= 0.6 * limit
    print(f"\ngoal (>= 5x openlineage-python and >= 60% of the limit): {'met' if ok else 'NOT met'}")
    return ok


def check_arrivals(name: str, order: RunOrder, runs: int, complete: bool, repeats: int = 0) -> None:
    """Complain (stderr) about lost or repeated events (other than `repeats` expected ones): the rows
    would not be comparable."""
    if order.duplicates != repeats or (complete and (order.incomplete or order.runs != runs)):
        print(
            f"  WARNING {name}: {order.runs} runs of {runs} seen, {order.incomplete} incomplete, "
            f"{order.duplicates} repeated events",
            file=sys.stderr,
        )


def validate_bodies(bodies: list[bytes]) -> str:
    """Validate every body against the official OpenLineage schemas (the tests' receiver does)."""
    from tests.support.openlineage_schema import spec_dir, validator

    if spec_dir() is None:
        return "not validated (OpenLineage spec schemas not found)"
    v = validator()
    for body in bodies:
        v.validate(body)
    return "all valid OpenLineage RunEvents"


def run_skewed(args: argparse.Namespace) -> bool:
    """The realistic row: Zipf-skewed root-job keys, 10 ms receiver. Prints its table; True if met."""
    c = args.concurrency
    events = make_run_trees(args.runs, roots=args.roots, exponent=args.zipf, seed=args.seed)
    bodies = [e.value for e in events]
    docs = [json.loads(b) for b in bodies]
    single = docs[: args.ol_single_events]
    validity = validate_bodies(bodies)
    keys: dict[bytes, int] = {}
    for e in events:
        keys[e.key] = keys.get(e.key, 0) + 1
    shares = sorted(keys.values(), reverse=True)
    weights = zipf_weights(args.roots, args.zipf)
    receiver = FastReceiver(latency_ms=args.latency_ms, track_runs=True)
    names = {
        "sink": f"olstream sink (Kafka -> HTTP, concurrency {c})",
        "sink_wall": "olstream sink incl. start-up and group join",
        "raw": f"raw aiohttp keep-alive loop, {c} connections (limit)",
        "ol": f"openlineage-python HttpTransport.emit, {c} threads",
        "ol1": "openlineage-python HttpTransport.emit, 1 thread",
    }
    best: dict[str, float] = {}
    violations: dict[str, int] = dict.fromkeys(names, 0)
    early: dict[str, int] = dict.fromkeys(names, 0)
    startups: list[float] = []
    repeated: list[int] = []  # the sink's posts beyond the events, per round

    def record(key: str, value: float, round_no: int, complete: bool = True, repeats: int = 0) -> None:
        order = run_order(receiver.arrivals())
        check_arrivals(names[key], order, args.runs, complete, repeats)
        violations[key] += order.out_of_order
        early[key] += order.early
        best[key] = max(best.get(key, 0.0), value)
        print(
            f"  skewed round {round_no + 1}: {names[key]}: {value:,.0f} ev/s, "
            f"{order.out_of_order} out of order, {order.early} early",
            file=sys.stderr,
        )

    try:
        for round_no in range(args.repeat):
            receiver.reset()
            sink_rate, sink_wall, startup, repeats = bench_sink(
                args.bootstrap, receiver, events, c, args.partitions, args.sink_root
            )
            startups.append(startup)
            repeated.append(repeats)
            best["sink_wall"] = max(best.get("sink_wall", 0.0), sink_wall)
            record("sink", sink_rate, round_no, repeats=repeats)
            receiver.reset()
            record("raw", bench_aiohttp(receiver, bodies, c, shared=True), round_no)
            receiver.reset()
            record("ol", bench_openlineage_threads(receiver, docs, c), round_no)
            if single:
                receiver.reset()
                record("ol1", bench_openlineage_python(receiver, single), round_no, complete=False)
    finally:
        receiver.close()

    raw, ol = best["raw"], best["ol"]
    print(
        f"\nskewed: best of {args.repeat} rounds; {args.runs} runs = {len(events)} events ({validity}); "
        f"{len(keys)} keys run:{{namespace}}/{{root job}} (Zipf exponent {args.zipf}, seed {args.seed}; "
        f"the hot key {shares[0] / len(events):.0%} of events, expected {weights[0]:.0%}, the next "
        f"{', '.join(f'{n / len(events):.0%}' for n in shares[1:4])}); {args.partitions} partitions; "
        f"receiver latency {args.latency_ms:g} ms; {len(single)} events for openlineage-python on 1 thread"
    )
    ol1 = best.get("ol1", 0.0)
    print(
        f"{'path':<62} {'events/s':>10} {'vs raw':>7} {f'vs OL-py {c}t':>11} {'vs OL-py 1t':>11} "
        f"{'order violations':>16} {'early':>6}"
    )
    for key, name in names.items():
        if key not in best:
            continue
        value = best[key]
        bad = "" if key == "sink_wall" else f"{violations[key]:,}"
        soon = "" if key == "sink_wall" else f"{early[key]:,}"
        vs1 = f"{value / ol1:.1f}x" if ol1 else "-"
        print(
            f"{name:<62} {value:>10,.0f} {value / raw:>7.0%} {value / ol:>10.1f}x {vs1:>11} "
            f"{bad:>16} {soon:>6}"
        )
    print(
        "(summed over the rounds: order violations = runs whose COMPLETE arrived before their START; "
        "early = runs whose COMPLETE arrived after their START but before the START was answered)"
    )
    print(f"(sink start-up, process start to its first request: {min(startups):.1f}-{max(startups):.1f} s)")
    per_1000 = [1000 * r / len(events) for r in repeated]
    print(
        f"(sink repeats of job versions, posts beyond the {len(events)} events: "
        f"{', '.join(f'{r:,}' for r in repeated)} per round, {min(per_1000):.1f}-{max(per_1000):.1f} "
        "per 1,000 events; the sink's rates count events, not posts)"
    )
    sink = best["sink"]

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    print("\ngoal:")
    print(f"  sink >= 80% of the raw loop: {sink / raw:.0%}, {verdict(sink >= 0.8 * raw)}")
    reach = "" if raw >= 10 * ol else f" (out of reach here: the raw loop itself is {raw / ol:.1f}x)"
    ok_ol = sink >= 10 * ol
    print(f"  sink >= 10x openlineage-python, {c} threads: {sink / ol:.1f}x, {verdict(ok_ol)}{reach}")
    if ol1:
        ok_ol1 = sink >= 10 * ol1
        print(f"  sink >= 10x openlineage-python, 1 thread: {sink / ol1:.1f}x, {verdict(ok_ol1)}")
    ordered = not violations["sink"]
    print(f"  no per-run order violations by the sink: {violations['sink']}, {verdict(ordered)}")
    waited = not early["sink"]
    print(f"  (and no COMPLETE sent before its START was answered: {early['sink']}, {verdict(waited)})")
    return sink >= 0.8 * raw and ok_ol and ordered


def run_running(args: argparse.Namespace) -> None:
    """Sink events/s with the worker's RUNNING events off and on, over the same simulated log."""
    import tempfile

    from tests.support.sink_events import worker_events

    with tempfile.TemporaryDirectory(prefix="olstream-bench-sink-") as tmp:
        workloads = {mode: worker_events(Path(tmp) / mode, args.runs, args.seed, mode == "on")
                     for mode in ("off", "on")}  # fmt: skip
    receiver = FastReceiver(latency_ms=args.latency_ms)
    best: dict[str, float] = {}
    try:
        for round_no in range(args.repeat):
            for mode, events in workloads.items():
                receiver.reset()
                value, _, _ = bench_sink(args.bootstrap, receiver, events, args.concurrency, args.partitions,
                                         args.sink_root)  # fmt: skip
                best[mode] = max(best.get(mode, 0.0), value)
                print(f"  running round {round_no + 1}: RUNNING {mode}: {value:,.0f} ev/s", file=sys.stderr)
    finally:
        receiver.close()
    print(
        f"\nrunning: best of {args.repeat} rounds; the worker's events of {args.runs} simulated runs "
        f"(seed {args.seed}); {args.partitions} partitions; receiver latency {args.latency_ms:g} ms; "
        f"sink concurrency {args.concurrency}"
    )
    print("| --running-events | events | events per run | sink events/s | runs/s |")
    print("|---|---:|---:|---:|---:|")
    for mode, events in workloads.items():
        per_run = len(events) / args.runs
        print(
            f"| {mode} | {len(events):,} | {per_run:.2f} | {best[mode]:,.0f} | {best[mode] / per_run:,.0f} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", choices=("uniform", "skewed", "running", "both"), default="both")
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get(
            "OLSTREAM_KAFKA_BOOTSTRAP", os.environ.get("OLSTREAM_BOOTSTRAP", "127.0.0.1:19092")
        ),
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each row reports its best round")
    parser.add_argument(
        "--sink-root", type=Path, help="run the olstream package of this checkout (default: this one's)"
    )
    uniform = parser.add_argument_group("uniform workload")
    uniform.add_argument(
        "--events", type=int, default=20000, help="events for the sink and the 16-connection loop"
    )
    uniform.add_argument(
        "--slow-events", type=int, default=4000, help="events for 1 connection, httpx, openlineage-python"
    )
    uniform.add_argument("--httpx", action="store_true", help="add the httpx rows (the client's choice)")
    skewed = parser.add_argument_group("skewed workload")
    skewed.add_argument("--runs", type=int, default=1500, help="runs (a START and a COMPLETE each)")
    skewed.add_argument("--roots", type=int, default=20, help="root jobs (distinct Kafka keys)")
    skewed.add_argument("--zipf", type=float, default=1.2, help="Zipf exponent of the root jobs' weights")
    skewed.add_argument("--seed", type=int, default=7)
    skewed.add_argument("--partitions", type=int, default=6)
    skewed.add_argument("--latency-ms", type=float, default=10.0, help="the receiver's latency per request")
    skewed.add_argument(
        "--ol-single-events",
        type=int,
        default=200,
        help="events for openlineage-python on 1 thread (0: skip)",
    )
    args = parser.parse_args()
    if args.sink_root is not None:
        args.sink_root = args.sink_root.resolve()
        print(f"sink: the olstream package of {args.sink_root}", file=sys.stderr)
    if args.workload in ("uniform", "both"):
        run_uniform(args)
    if args.workload in ("skewed", "both"):
        run_skewed(args)
    if args.workload == "running":
        run_running(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
