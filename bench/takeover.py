"""Bench: how soon a replica processes a killed worker's partitions again, with and without standby
copies of the run states (`--standby-states`).

    .venv/bin/python bench/takeover.py [--runs 100000] [--bootstrap 127.0.0.1:19292] [--modes off on]

Per mode, on fresh topics and a fresh group: publishes `--runs` open runs over 6 log partitions (a
changelog write each), runs two workers until both processed their share (with standbys, until the
survivor's copies caught up: `olstream_stream_standby_lag` 0), kills one with SIGKILL, publishes the
end of one run per log partition, and prints the time from the kill to the first event of a
partition the killed worker owned, and the survivor's restore of those partitions (changelog writes
applied, seconds), from its log.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from olstream.connectors.source.resume import placement_of  # noqa: E402
from olstream.devkit.process import free_port  # noqa: E402
from olstream.shared.kafka_admin import ensure_topic  # noqa: E402
from tests.support.stop_support import committed_everything  # noqa: E402
from tests.support.stream_records import T0, ended, started  # noqa: E402
from tests.support.stream_support import (  # noqa: E402
    metric,
    produce_records,
    start_worker,
    stop,
    tail,
    worker_cmd,
)

LOG_PARTITIONS = 6
ASSIGNED = re.compile(r"rebalance complete: input partitions \[([\d, ]*)\]")
RESTORED = re.compile(
    r"run states of input partitions \[([\d, ]*)\] restored from \S+: (\d+) changelog writes in ([\d.]+) s"
)


def assigned(log: Path) -> list[int]:
    found = ASSIGNED.findall(log.read_text(errors="replace"))
    return [int(p) for p in found[-1].split(",") if p.strip()] if found else []


def wait(what: str, check, timeout: float, logs: list[Path]) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not in {timeout:.0f} s\n" + "\n".join(tail(p, 20) for p in logs))
        time.sleep(0.5)


def one(bootstrap: str, runs: int, mode: str, session_timeout: float, work: Path) -> dict[str, float]:
    tag = f"bench-takeover-{mode}-{uuid.uuid4().hex[:8]}"
    src, out, err = f"{tag}.in", f"{tag}.out", f"{tag}.err"
    for topic, parts in ((src, 6), (out, 6), (err, 1)):
        ensure_topic(bootstrap, topic, parts)
    per = runs // LOG_PARTITIONS
    history = [
        started(
            f"run-{lp}-{i}",
            partition=lp,
            offset=i,
            instance=f"i-{lp}-{i}",
            start=T0 + timedelta(milliseconds=i),
        )
        for i in range(per)
        for lp in range(LOG_PARTITIONS)
    ]
    produce_records(bootstrap, src, history)
    placement = placement_of(bootstrap, src)
    ports = [free_port(), free_port()]
    logs = [work / f"{mode}-w0.log", work / f"{mode}-w1.log"]
    procs = [
        start_worker(
            worker_cmd(
                bootstrap,
                tag,
                work / f"{mode}-w{i}",
                src,
                out,
                err,
                "--session-timeout",
                str(session_timeout),
                "--standby-states",
                mode,
                "--metrics-port",
                str(ports[i]),
            ),
            logs[i],
        )
        for i in (0, 1)
    ]
    follower = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{tag}.follow", "enable.auto.commit": False}
    )
    try:
        started_at = time.monotonic()
        wait("history processed", lambda: committed_everything(bootstrap, tag, src), 900, logs)
        processed = time.monotonic() - started_at
        wait(
            "both own partitions",
            lambda: sorted(assigned(logs[0]) + assigned(logs[1])) == list(range(6)),
            60,
            logs,
        )
        taken = assigned(logs[1])
        if mode == "on":
            wait(
                "standby copies caught up",
                lambda: (
                    metric(ports[0], "olstream_stream_standby_lag") == 0
                    and metric(ports[0], "olstream_stream_standby_partitions") == len(taken)
                ),
                300,
                logs,
            )
        follower.assign(
            [
                TopicPartition(out, p, follower.get_watermark_offsets(TopicPartition(out, p), timeout=10)[1])
                for p in range(6)
            ]
        )
        victims = {
            f"run-{lp}-{per - 1}": lp
            for lp in range(LOG_PARTITIONS)
            if placement.kafka_partition(lp) in taken
        }
        log_at = logs[0].stat().st_size
        killed = time.monotonic()
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait()
        produce_records(bootstrap, src, [ended(rid, partition=lp, offset=per) for rid, lp in victims.items()])
        first = None
        while first is None and time.monotonic() - killed < 600:
            for msg in follower.consume(100, 0.1):
                if msg.error() is None and b'"COMPLETE"' in (msg.value() or b""):
                    first = time.monotonic() - killed
                    break
        if first is None:
            raise SystemExit("no event of a taken partition in 600 s\n" + tail(logs[0], 30))
        since = logs[0].read_text(errors="replace")[log_at:]
        restores = [
            (int(n), float(s))
            for ps, n, s in RESTORED.findall(since)
            if {int(p) for p in ps.split(",")} & set(taken)
        ]
        return {
            "processed_s": processed,
            "first_event_s": first,
            "restored_writes": sum(n for n, _ in restores),
            "restore_s": sum(s for _, s in restores),
        }
    finally:
        for p in procs:
            stop(p)
        follower.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--bootstrap", default="127.0.0.1:19292")
    ap.add_argument("--session-timeout", type=float, default=6.0)
    ap.add_argument("--modes", nargs="+", default=["off", "on"], choices=["off", "on"])
    ap.add_argument("--keep", action="store_true", help="keep the workers' logs and data dirs")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="olstream-bench-takeover-"))
    try:
        print(f"{args.runs} open runs, 2 workers, --session-timeout {args.session_timeout:g}; logs in {work}")
        print("standby | history processed | kill -> first event of a taken partition | survivor restored")
        for mode in args.modes:
            r = one(args.bootstrap, args.runs, mode, args.session_timeout, work)
            print(
                f"{mode:>7} | {r['processed_s']:>15.1f} s | {r['first_event_s']:>38.1f} s | "
                f"{r['restored_writes']:.0f} changelog writes in {r['restore_s']:.1f} s",
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
