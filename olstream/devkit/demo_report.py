"""The demo's summary: what the workers counted, and the table printed at the end."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from olstream.devkit.demo_support import (
    LogCounts,
    OutputTally,
    count_in_logs,
    histogram_buckets,
    merge_buckets,
    metric_total,
    parent_edges,
    quantile,
    scrape,
)

if TYPE_CHECKING:
    from olstream.devkit.demo_kafka import Rejections

WAIT_HISTOGRAM = "olstream_stream_parent_wait_seconds"


@dataclass(frozen=True, slots=True)
class WorkerFigures:
    """What the workers' metrics say about parents, read before they stop."""

    parent_not_visible: int
    children_waited: int = 0  # children with heads, through the run directory
    delay_p50: float | None = None  # seconds of START delay the directory added
    delay_p99: float | None = None

    def delay(self) -> str:
        if self.delay_p50 is None or self.delay_p99 is None:
            return "n/a"
        return f"{1000 * self.delay_p50:.1f} ms / {1000 * self.delay_p99:.1f} ms"


def worker_figures(metrics_ports: Sequence[int | None], logs: Sequence[Path]) -> WorkerFigures:
    """Scrape every worker once; without metrics, count the log lines."""
    texts = [t for t in (scrape(port) for port in metrics_ports if port) if t]
    if not texts:
        return WorkerFigures(count_in_logs(logs, "parent_not_visible"))
    buckets = merge_buckets(histogram_buckets(t, WAIT_HISTOGRAM) for t in texts)
    return WorkerFigures(
        int(sum(metric_total(t, "parent_not_visible") for t in texts)),
        int(buckets.get(float("inf"), 0.0)),
        quantile(buckets, 0.5),
        quantile(buckets, 0.99),
    )


def cut_off_children(counts: LogCounts, tally: OutputTally) -> list[str]:
    """Engine run ids of children whose parent is in the log but whose START has no parent edge."""
    with_edge, _ = parent_edges(tally.events)
    return sorted(counts.children_with_parent - with_edge)


def summary_rows(
    counts: LogCounts,
    tally: OutputTally,
    graph: dict[str, int],
    events_by_type: dict[str, int],
    figures: WorkerFigures,
    rejected: Rejections,
    elapsed: float,
) -> list[tuple[str, object]]:
    return [
        ("runs simulated (started / finished)", f"{counts.runs_started} / {counts.runs_finished}"),
        *((f"events {t}", n) for t, n in sorted(events_by_type.items())),
        ("RUNNING events expected (datasets added to open runs)", counts.running_events),
        (
            "runs left open (of them showing datasets)",
            f"{graph['open_runs']} ({graph['open_runs_with_datasets']})",
        ),
        ("duplicate deliveries (byte-identical)", tally.duplicates),
        ("re-sent events that differ (must be 0)", tally.conflicting),
        ("jobs", graph["jobs"]),
        ("datasets", graph["datasets"]),
        ("dataset edges (read/write)", graph["dataset_edges"]),
        ("child runs with their parent in the log", len(counts.children_with_parent)),
        ("child runs whose parent is not in the log", counts.children_parent_absent),
        ("parent edges emitted (START events with a parent)", len(parent_edges(tally.events)[0])),
        ("job-level parent edges in the graph", graph["parent_edges"]),
        ("parent_not_visible", figures.parent_not_visible),
        ("child STARTs with the source's heads", figures.children_waited),
        ("  their START delay p50 / p99 (directory wait)", figures.delay()),
        ("events rejected by the receiver (must be 0)", rejected.total),
        *(
            (f"  rejected with HTTP {status}", f"{n}, first: {first_reason(reason)}")
            for status, (n, reason) in sorted(rejected.by_status.items())
        ),
        ("elapsed", f"{elapsed:.1f} s"),
    ]


def first_reason(body: str, limit: int = 160) -> str:
    """A receiver's response as one short line (Marquez answers an HTML page: its text, tags dropped)."""
    text = " ".join(re.sub(r"<[^>]*>", " ", body).split())
    return (text[:limit] + "…") if len(text) > limit else (text or "(empty body)")
