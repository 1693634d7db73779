"""The lineage graph of a set of OpenLineage RunEvents, and its picture (SVG, PNG or HTML).

The model is pure code (`build_graph`, `to_dot`); only `render` needs the Graphviz binaries.
Nodes are jobs and datasets; edges are reads (dataset -> job), writes (job -> dataset) and
parent/child links between jobs (from the `parent` run facet). Jobs with a failed run are marked.
A run that is still open (no terminal event) is drawn with the datasets its START and RUNNING events
carried: its job dashed, and the edges only open runs have so far dashed too ("reads, running").
"""

from __future__ import annotations

import html
import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olstream.shared.errors import ConfigError, OlstreamError
from olstream.shared.extras import require

log = logging.getLogger(__name__)

TERMINAL_TYPES = frozenset({"COMPLETE", "FAIL", "ABORT"})
RENDER_FORMATS = ("svg", "png", "html")


@dataclass(frozen=True, order=True)
class NodeId:
    """A job or dataset, identified the OpenLineage way: kind, namespace, name."""

    kind: str  # "job" or "dataset"
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.namespace}:{self.name}"


@dataclass(frozen=True, order=True)
class Edge:
    source: NodeId
    target: NodeId
    kind: str  # "read", "write" or "parent"


@dataclass
class JobStats:
    """Runs of one job by final state (the last event type seen for each run)."""

    states: Counter[str] = field(default_factory=Counter)

    @property
    def failed(self) -> bool:
        return self.states["FAIL"] > 0


@dataclass
class LineageGraph:
    jobs: dict[NodeId, JobStats] = field(default_factory=dict)
    datasets: set[NodeId] = field(default_factory=set)
    edges: set[Edge] = field(default_factory=set)
    events_by_type: Counter[str] = field(default_factory=Counter)
    run_states: dict[str, str] = field(default_factory=dict)
    run_edges: dict[str, set[Edge]] = field(default_factory=dict)  # run id -> its read and write edges
    job_of_run: dict[str, NodeId] = field(default_factory=dict)

    @property
    def open_runs(self) -> list[str]:
        """Runs without a terminal event (their last event a START or RUNNING), in first-seen order."""
        return [r for r, s in self.run_states.items() if s not in TERMINAL_TYPES]

    @property
    def open_edges(self) -> set[Edge]:
        """Read and write edges that only open runs have (no finished run of the job has them)."""
        finished = {
            e for r, s in self.run_states.items() if s in TERMINAL_TYPES for e in self.run_edges.get(r, ())
        }
        return {e for r in self.open_runs for e in self.run_edges.get(r, ())} - finished

    @property
    def open_jobs(self) -> set[NodeId]:
        return {self.job_of_run[r] for r in self.open_runs}

    @property
    def dataset_edges(self) -> list[Edge]:
        return sorted(e for e in self.edges if e.kind in ("read", "write"))

    @property
    def parent_edges(self) -> list[Edge]:
        return sorted(e for e in self.edges if e.kind == "parent")

    @property
    def terminal_runs(self) -> int:
        return sum(1 for s in self.run_states.values() if s in TERMINAL_TYPES)

    def summary(self) -> dict[str, int]:
        return {
            "runs": len(self.run_states),
            "finished_runs": self.terminal_runs,
            "events": sum(self.events_by_type.values()),
            "jobs": len(self.jobs),
            "datasets": len(self.datasets),
            "dataset_edges": len(self.dataset_edges),
            "parent_edges": len(self.parent_edges),
            "failed_jobs": sum(1 for s in self.jobs.values() if s.failed),
            "open_runs": len(self.open_runs),
            "open_runs_with_datasets": sum(1 for r in self.open_runs if self.run_edges.get(r)),
        }


def load_events(path: Path) -> list[dict[str, Any]]:
    """Read newline-delimited JSON RunEvents; a bad line is an error naming the file and line."""
    events: list[dict[str, Any]] = []
    try:
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                except json.JSONDecodeError as e:
                    raise OlstreamError(f"{path}:{lineno}: not a JSON RunEvent: {e}") from e
                if not isinstance(doc, dict):
                    raise OlstreamError(f"{path}:{lineno}: not a JSON object")
                events.append(doc)
    except OSError as e:
        raise ConfigError(f"cannot read events from {path}: {e}") from e
    return events


def _job_of(doc: Mapping[str, Any]) -> NodeId | None:
    job = doc.get("job")
    if not isinstance(job, Mapping):
        return None
    ns, name = job.get("namespace"), job.get("name")
    if not isinstance(ns, str) or not isinstance(name, str):
        return None
    return NodeId("job", ns, name)


def _datasets_of(doc: Mapping[str, Any], key: str) -> list[NodeId]:
    found: list[NodeId] = []
    for ds in doc.get(key) or ():
        if (
            isinstance(ds, Mapping)
            and isinstance(ds.get("namespace"), str)
            and isinstance(ds.get("name"), str)
        ):
            found.append(NodeId("dataset", ds["namespace"], ds["name"]))
    return found


def _parent_of(doc: Mapping[str, Any], job_of_run: Mapping[str, NodeId]) -> NodeId | None:
    facets = (doc.get("run") or {}).get("facets") or {}
    parent = facets.get("parent") if isinstance(facets, Mapping) else None
    if not isinstance(parent, Mapping):
        return None
    job = _job_of(parent)
    if job is not None:
        return job
    run = parent.get("run")
    run_id = run.get("runId") if isinstance(run, Mapping) else None
    return job_of_run.get(run_id) if isinstance(run_id, str) else None


def build_graph(events: Iterable[Mapping[str, Any]]) -> LineageGraph:
    """Fold RunEvents (in delivery order) into jobs, datasets and edges."""
    graph = LineageGraph()
    pending_parents: list[tuple[Mapping[str, Any], NodeId]] = []
    job_of_run = graph.job_of_run
    for doc in events:
        job = _job_of(doc)
        run_id = (doc.get("run") or {}).get("runId")
        if job is None or not isinstance(run_id, str):
            log.warning("skipping an event without job or runId")
            continue
        event_type = str(doc.get("eventType") or "OTHER")
        graph.events_by_type[event_type] += 1
        graph.jobs.setdefault(job, JobStats())
        job_of_run[run_id] = job
        # A run's final state is its terminal event; later non-terminal repeats do not undo it.
        if graph.run_states.get(run_id) not in TERMINAL_TYPES or event_type in TERMINAL_TYPES:
            graph.run_states[run_id] = event_type
        run_edges = graph.run_edges.setdefault(run_id, set())
        for edge in [Edge(ds, job, "read") for ds in _datasets_of(doc, "inputs")] + [
            Edge(job, ds, "write") for ds in _datasets_of(doc, "outputs")
        ]:
            graph.datasets.add(edge.source if edge.kind == "read" else edge.target)
            graph.edges.add(edge)
            run_edges.add(edge)
        pending_parents.append((doc, job))
    for doc, job in pending_parents:
        parent = _parent_of(doc, job_of_run)
        if parent is not None and parent != job:
            graph.jobs.setdefault(parent, JobStats())
            graph.edges.add(Edge(parent, job, "parent"))
    for run_id, state in graph.run_states.items():
        graph.jobs[job_of_run[run_id]].states[state] += 1
    return graph


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _job_label(job: NodeId, stats: JobStats) -> str:
    open_runs = sum(n for s, n in stats.states.items() if s not in TERMINAL_TYPES)
    parts = [f"{n} {s.lower()}" for s, n in sorted(stats.states.items()) if s in TERMINAL_TYPES]
    parts += [f"{open_runs} open"] if open_runs else []
    return f"{job.name}\n{job.namespace}\n" + ", ".join(parts)


def to_dot(graph: LineageGraph, title: str = "olstream lineage") -> str:
    """The graph in Graphviz DOT: jobs as boxes (red when a run failed), datasets as cylinders."""
    lines = [
        "digraph lineage {",
        f"  graph [rankdir=LR, label={_quote(title)}, labelloc=t, fontname=Helvetica];",
        "  node [fontname=Helvetica, fontsize=10];",
        "  edge [fontname=Helvetica, fontsize=8];",
    ]
    open_jobs, open_edges = graph.open_jobs, graph.open_edges
    for job in sorted(graph.jobs):
        stats = graph.jobs[job]
        running = job in open_jobs
        strokes = ("bold," if stats.failed else "") + ("dashed," if running else "")
        colors = (
            'fillcolor="#f8d0d0", color="#c00000"' if stats.failed else 'fillcolor="#d8e8f8", color="#3060a0"'
        )
        style = f'style="{strokes}filled", {colors}'
        tooltip = "FAILED runs present" if stats.failed else "all runs ok"
        tooltip += "; runs still open" if running else ""
        lines.append(
            f"  {_quote(job.key)} [shape=box, label={_quote(_job_label(job, stats))}, {style}, "
            f"tooltip={_quote(tooltip)}];"
        )
    for ds in sorted(graph.datasets):
        lines.append(
            f"  {_quote(ds.key)} [shape=cylinder, label={_quote(ds.name + chr(10) + ds.namespace)}, "
            'style=filled, fillcolor="#eef6e8", color="#508030"];'
        )
    for edge in sorted(graph.edges):
        attrs = {
            "read": 'color="#508030", label="reads"',
            "write": 'color="#3060a0", label="writes"',
            "parent": 'style=dashed, color="#888888", label="parent of", arrowhead=odiamond',
        }[edge.kind]
        if edge in open_edges:
            attrs = (
                attrs.replace('label="reads"', 'label="reads, running"').replace(
                    'label="writes"', 'label="writes, running"'
                )
                + ", style=dashed"
            )
        lines.append(f"  {_quote(edge.source.key)} -> {_quote(edge.target.key)} [{attrs}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def format_of(path: Path) -> str:
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in RENDER_FORMATS:
        raise ConfigError(f"cannot render {path}: use one of .{', .'.join(RENDER_FORMATS)}")
    return fmt


def html_page(svg: str, graph: LineageGraph, title: str) -> str:
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>" for k, v in graph.summary().items())
    return (
        '<!doctype html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n<table>{rows}</table>\n{svg}\n</body></html>\n"
    )


def render(graph: LineageGraph, out: Path, title: str = "olstream lineage") -> Path:
    """Write the picture; the format comes from the file's suffix (.svg, .png, .html)."""
    # imported here so the model (and `olstream graph --dot`) works without the `local` extra
    graphviz = require("graphviz", "rendering the lineage graph")

    fmt = format_of(out)
    source = graphviz.Source(to_dot(graph, title))
    try:
        data = source.pipe(format="svg" if fmt == "html" else fmt)
    except graphviz.ExecutableNotFound as e:
        raise ConfigError("Graphviz 'dot' is not installed (apt-get install -y graphviz)") from e
    except graphviz.CalledProcessError as e:
        raise OlstreamError(f"Graphviz failed to render {out}: {e}") from e
    if fmt == "html":
        data = html_page(data.decode("utf-8"), graph, title).encode("utf-8")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return out
