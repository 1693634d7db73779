"""Bench: the stream worker's records/s on a pre-filled input topic, next to the limit.

    .venv/bin/python bench/stream.py [--runs 20000] [--partitions 6] [--bootstrap 127.0.0.1:19092]
        [--seed 3] [--skip-noop] [--running-events off|on|both]
        [--processing-guarantee exactly_once|at_least_once|both]

A seeded simulated workload (``olstream.eventlog.simulate``) of --runs runs is written to
a fresh SQLite log and published to a fresh input topic as the source connector does. Then,
in the same run and over the same topic:

- limit: a raw confluent-kafka loop consumes every record and produces it to another
  topic (acks=all, flushed, offsets committed);
- faust no-op: a faust-streaming agent that only acks each record (the framework's own
  ceiling on this machine);
- worker: ``olstream worker --until-idle`` (a subprocess). Its rate is measured from its
  metrics (first record processed -> last), so start-up and shutdown are not timed; the
  wall time with them is printed too, with its CPU seconds and RSS (sampled every 0.5 s;
  printed at every 25% of the runs started, and at the end).

RUNNING events (issue 29): the worker runs once per --running-events mode (default both, off first),
each over the same input with its own app id; the table above is the off run (the baseline), and a
second table gives events, events per run, records/s and CPU seconds per mode.

Processing guarantees (issue 38): with RUNNING events off the worker runs once per
--processing-guarantee (default both: exactly_once, the default, first; then at_least_once), and a
third table gives each one's records/s, its share of at_least_once's and of faust's no-op agent,
the checkpoints' share of the worker's time, the worker's peak thread count, and the broker's CPU
seconds while the worker ran (transactions cost the broker CPU; the broker is the process listening
on --bootstrap's port on this machine).

Goal (issue 4): >= 5,000 records/s per worker and >= 25% of the limit. The machine may be
shared: CPU seconds are printed next to wall time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer  # noqa: E402

from olstream.devkit.demo_support import histogram_buckets, quantile  # noqa: E402
from olstream.devkit.process import free_port  # noqa: E402
from olstream.shared.kafka_admin import ensure_topic  # noqa: E402
from tests.support.stream_support import produce_rows, simulated_rows  # noqa: E402

NOOP_AGENT = r"""
import os, signal, sys, time, faust
topic, total, app_id, bootstrap, data, result = sys.argv[1:7]
total = int(total)
app = faust.App(
    app_id, broker=f"kafka://{bootstrap}", web_enabled=False, consumer_auto_offset_reset="earliest",
    key_serializer="raw", value_serializer="raw", datadir=data, store="memory://",
)
t = app.topic(topic, key_type=bytes, value_type=bytes)
state = {"n": 0, "t0": None}
@app.agent(t, concurrency=1)
async def count(stream):
    async for _ in stream.events():
        if state["t0"] is None:
            state["t0"] = time.perf_counter()
        state["n"] += 1
        if state["n"] >= total:
            with open(result, "w") as f:
                f.write(str(time.perf_counter() - state["t0"]))
            os.kill(os.getpid(), signal.SIGTERM)
try:
    faust.Worker(app, loglevel="WARNING", quiet=True).execute_from_commandline()
except SystemExit:
    pass
"""


def raw_loop(bootstrap: str, src: str, dst: str, total: int) -> tuple[float, float]:
    """Consume every record of src and produce it to dst; (seconds, cpu seconds)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-raw-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, "acks": "all"})
    c.subscribe([src])
    n, started, cpu0 = 0, None, time.process_time()
    while n < total:
        batch = c.consume(10_000, 1.0)
        if started is None and batch:
            started = time.perf_counter()
        for m in batch:
            while True:
                try:
                    # to the same partition: the copy keeps the source's placement
                    p.produce(dst, m.value(), m.key(), m.partition() or 0, headers=m.headers())
                    break
                except BufferError:
                    p.poll(0.05)
            n += 1
        p.poll(0)
    p.flush(60)
    c.commit(asynchronous=False)
    assert started is not None
    seconds = time.perf_counter() - started
    c.close()
    return seconds, time.process_time() - cpu0


def metric(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M))


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def threads(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def broker_pid(bootstrap: str) -> int | None:
    """The pid of the local process listening on the first bootstrap server's port (None: not here)."""
    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                return int(proc.name)
        except OSError:
            continue
    return None


def checkpoint_share(m: dict[str, object]) -> str:
    if not m["split"]:
        return "-"
    busy, flush, _ = (float(x) for x in cast(tuple[str, str, str], m["split"]))
    return f"{100 * flush / max(busy + flush, 1e-9):.0f}%"


def run_worker(
    bootstrap: str,
    src: str,
    total: int,
    runs: int,
    work: Path,
    profile: Path | None = None,
    running_events: str = "off",
    guarantee: str = "exactly_once",
) -> dict[str, object]:
    port = free_port()
    app_id = f"bench-worker-{uuid.uuid4().hex[:8]}"
    name = f"{running_events}.{guarantee}"
    out = f"{src}.out.{name}"
    cmd = [
        sys.executable, "-m", "olstream", "worker", "--bootstrap", bootstrap, "--app-id", app_id,
        "--data-dir", str(work / f"worker-{name}"), "--input-topic", src, "--output-topic", out,
        "--errors-topic", f"{src}.errors.{name}", "--until-idle", "--metrics-port", str(port),
        "--running-events", running_events, "--processing-guarantee", guarantee,
    ]  # fmt: skip
    if profile is not None:  # py-spy samples the worker (its RSS and CPU columns are py-spy's then)
        cmd = ["py-spy", "record", "--format", "raw", "--rate", "200", "-o", str(profile), "--", *cmd]
    broker = broker_pid(bootstrap)
    broker_cpu = cpu_seconds(broker) if broker is not None else None
    log_path = work / f"worker-{name}.log"
    log = log_path.open("wb")
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    first = last = None
    scraped = ""
    rss_marks: dict[int, float] = {}
    peak = 0.0
    peak_threads = 0
    last_cpu = 0.0
    while proc.poll() is None:
        time.sleep(0.5)
        peak = max(peak, rss_mb(proc.pid))
        peak_threads = max(peak_threads, threads(proc.pid))
        last_cpu = cpu_seconds(proc.pid) or last_cpu
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
        except OSError:
            continue
        scraped = text
        done = metric(text, "olstream_stream_records_total")
        started_runs = metric(
            text, 'olstream_stream_records_total{type="RunStarted"}'.replace("{", r"\{").replace("}", r"\}")
        )
        now = time.perf_counter()
        if done > 0 and first is None:
            first = (now, done)
        if done >= total and last is None:
            last = now
        for q in (1, 2, 3, 4):
            if started_runs >= runs * q / 4 and q not in rss_marks:
                rss_marks[q] = rss_mb(proc.pid)
    wall = time.perf_counter() - started
    if broker is not None and broker_cpu is not None:
        broker_cpu = cpu_seconds(broker) - broker_cpu
    if proc.returncode != 0:
        raise SystemExit(f"worker exited {proc.returncode}; see {log_path}")
    assert first is not None
    split = re.search(
        r"\(([\d.]+) s processing records, ([\d.]+) s in checkpoints, ([\d.]+) s in garbage collections\)",
        log_path.read_text(),
    )
    waits = histogram_buckets(scraped, "olstream_stream_parent_wait_seconds")
    end = last or time.perf_counter()
    seconds = max(end - first[0], 1e-9)
    return {
        "seconds": seconds,
        "rate": (total - first[1]) / seconds,
        "wall": wall,
        "cpu": last_cpu,
        "peak": peak,
        "threads": peak_threads,
        "marks": rss_marks,
        "split": split.groups() if split else None,
        "child_delay": (quantile(waits, 0.5), quantile(waits, 0.99), int(waits.get(float("inf"), 0))),
        "broker_cpu": broker_cpu,
        "events": metric(scraped, "olstream_stream_events_total"),
        "running": metric(
            scraped,
            'olstream_stream_events_total{event_type="RUNNING"}'.replace("{", r"\{").replace("}", r"\}"),
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--bootstrap",
        default=os.environ.get(
            "OLSTREAM_KAFKA_BOOTSTRAP", os.environ.get("OLSTREAM_BOOTSTRAP", "127.0.0.1:19092")
        ),
    )
    ap.add_argument("--runs", type=int, default=20_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--skip-noop", action="store_true")
    ap.add_argument("--running-events", choices=("off", "on", "both"), default="both")
    ap.add_argument(
        "--processing-guarantee", choices=("exactly_once", "at_least_once", "both"), default="both"
    )
    ap.add_argument(
        "--profile", type=Path, help="py-spy raw (collapsed) stacks of the worker to this file (needs py-spy)"
    )
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="olstream-bench-stream-"))
    rows, summary = simulated_rows(work, args.runs, args.seed)
    total = len(rows)
    tag = uuid.uuid4().hex[:8]
    src = f"bench.stream.{tag}"
    ensure_topic(args.bootstrap, src, args.partitions)
    ensure_topic(args.bootstrap, f"{src}.raw", args.partitions)
    produce_rows(args.bootstrap, src, rows)
    print(f"input: {total:,} records of {args.runs:,} simulated runs ({summary.open_runs:,} left open) "
          f"in {args.partitions} partitions")  # fmt: skip

    raw_s, _ = raw_loop(args.bootstrap, src, f"{src}.raw", total)
    noop = None
    if not args.skip_noop:
        result = work / "noop.seconds"
        subprocess.run(
            [sys.executable, "-c", NOOP_AGENT, src, str(total), f"bench-noop-{tag}", args.bootstrap,
             str(work / "noop"), str(result)],
            capture_output=True, timeout=1800, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        noop = float(result.read_text()) if result.exists() else None
    modes = ("off", "on") if args.running_events == "both" else (args.running_events,)
    guarantees = (
        ("exactly_once", "at_least_once")
        if args.processing_guarantee == "both"
        else (args.processing_guarantee,)
    )
    by_mode = {
        mode: run_worker(args.bootstrap, src, total, args.runs, work, args.profile, mode, guarantees[0])
        for mode in modes
    }
    by_guarantee = {guarantees[0]: by_mode["off"]} if "off" in by_mode else {}
    for guarantee in guarantees:
        if guarantee not in by_guarantee:
            by_guarantee[guarantee] = run_worker(
                args.bootstrap, src, total, args.runs, work, None, "off", guarantee
            )
    w = by_mode[modes[0]]

    limit = total / raw_s
    rate = float(w["rate"])  # type: ignore[arg-type]
    print()
    print("| measurement | records | seconds | records/s |")
    print("|---|---:|---:|---:|")
    print(
        f"| raw confluent-kafka consume+produce loop (the limit) | {total:,} | {raw_s:.1f} | {limit:,.0f} |"
    )
    if noop is not None:
        name = "faust-streaming no-op agent (framework ceiling)"
        share = 100 * raw_s / noop  # its records/s over the limit's
        print(f"| {name} | {total:,} | {noop:.1f} | {total / noop:,.0f} ({share:.0f}%) |")
    print(
        f"| olstream worker (processing, from its metrics) | {total:,} | {w['seconds']:.1f} | {rate:,.0f} |"
    )
    print()
    print(f"worker / limit: {100 * rate / limit:.1f}%   (goals: >= 5,000 records/s and >= 25%)")
    if noop is not None:
        print(f"worker / faust no-op agent: {100 * rate / (total / noop):.1f}%   (goal: >= 60%)")
    print(f"worker wall time with start-up and shutdown: {w['wall']:.1f} s, CPU {w['cpu']:.1f} s")
    if w["split"]:
        busy, flush, collecting = cast(tuple[str, str, str], w["split"])
        print(
            f"worker's own timers: {busy} s processing records, {flush} s in checkpoints, "
            f"{collecting} s in garbage collections"
        )
    p50, p99, children = w["child_delay"]  # type: ignore[misc]
    if children and p50 is not None and p99 is not None:
        print(
            f"child START delay through the run directory ({children:,} children, from its histogram): "
            f"p50 {1000 * p50:.1f} ms, p99 {1000 * p99:.1f} ms"
        )
    marks = w["marks"]
    assert isinstance(marks, dict)
    for q in sorted(marks):
        print(f"worker RSS after {args.runs * q // 4:,} runs started: {marks[q]:.0f} MB")
    print(f"worker peak RSS: {w['peak']:.0f} MB")
    print()
    print(f"RUNNING events (--running-events, under {guarantees[0]}; the rows above: {modes[0]})")
    print("| --running-events | events | of them RUNNING | events per run | records/s | wall s | CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode, m in by_mode.items():
        events, running = float(m["events"]), float(m["running"])  # type: ignore[arg-type]
        print(
            f"| {mode} | {events:,.0f} | {running:,.0f} | {events / args.runs:.2f} | "
            f"{float(m['rate']):,.0f} | {float(m['wall']):.1f} | {float(m['cpu']):.1f} |"  # type: ignore[arg-type]
        )
    if by_guarantee:
        print()
        print("Processing guarantees (--processing-guarantee, RUNNING events off)")
        print(
            "| --processing-guarantee | records/s | of at_least_once | of faust's no-op | checkpoints' "
            "share | peak threads | wall s | CPU s | broker CPU s |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        base = by_guarantee.get("at_least_once")
        for guarantee, m in by_guarantee.items():
            r = float(m["rate"])  # type: ignore[arg-type]
            of_alo = f"{100 * r / float(base['rate']):.1f}%" if base is not None else "-"  # type: ignore[arg-type]
            of_noop = f"{100 * r / (total / noop):.1f}%" if noop is not None else "-"
            bcpu = m["broker_cpu"]
            print(
                f"| {guarantee} | {r:,.0f} | {of_alo} | {of_noop} | {checkpoint_share(m)} | {m['threads']} | "
                f"{float(m['wall']):.1f} | "  # type: ignore[arg-type]
                f"{float(m['cpu']):.1f} | {'-' if bcpu is None else f'{float(bcpu):.1f}'} |"  # type: ignore[arg-type]
            )
        print(
            "checkpoints' share: the worker's time in checkpoints over its time processing records and in "
            "checkpoints (its own timers; no record is processed while a checkpoint runs)"
        )
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
