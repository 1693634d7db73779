"""The lineage graph model (pure: no Graphviz binaries needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from olstream.devkit.graph import Edge, NodeId, build_graph, format_of, html_page, load_events, to_dot
from olstream.shared.errors import ConfigError, OlstreamError

NS = "engine://prod"


def _event(
    event_type: str,
    job: str,
    run_id: str,
    inputs: list[str] = (),  # type: ignore[assignment]
    outputs: list[str] = (),  # type: ignore[assignment]
    parent: tuple[str, str] | None = None,
    parent_job_in_facet: bool = True,
) -> dict[str, Any]:
    facets: dict[str, Any] = {}
    if parent is not None:
        facet: dict[str, Any] = {"run": {"runId": parent[1]}, "_producer": "p", "_schemaURL": "s"}
        if parent_job_in_facet:
            facet["job"] = {"namespace": NS, "name": parent[0]}
        facets["parent"] = facet
    return {
        "eventType": event_type,
        "eventTime": "2026-01-01T00:00:00Z",
        "job": {"namespace": NS, "name": job},
        "run": {"runId": run_id, "facets": facets},
        "inputs": [{"namespace": "s3://bucket", "name": n} for n in inputs],
        "outputs": [{"namespace": "s3://bucket", "name": n} for n in outputs],
    }


def _job(name: str) -> NodeId:
    return NodeId("job", NS, name)


def _ds(name: str) -> NodeId:
    return NodeId("dataset", "s3://bucket", name)


def test_jobs_datasets_and_read_write_edges() -> None:
    g = build_graph(
        [
            _event("START", "etl@1", "r1"),
            _event("COMPLETE", "etl@1", "r1", inputs=["raw"], outputs=["clean"]),
        ]
    )
    assert set(g.jobs) == {_job("etl@1")}
    assert g.datasets == {_ds("raw"), _ds("clean")}
    assert g.dataset_edges == sorted(
        [Edge(_ds("raw"), _job("etl@1"), "read"), Edge(_job("etl@1"), _ds("clean"), "write")]
    )
    assert g.events_by_type == {"START": 1, "COMPLETE": 1}
    assert g.summary()["finished_runs"] == 1
    assert g.summary()["runs"] == 1


def test_parent_edges_from_facet_and_from_parent_run_id() -> None:
    g = build_graph(
        [
            _event("START", "parent@1", "p1"),
            _event("START", "child@1", "c1", parent=("parent@1", "p1")),
            # the facet lacks the job: the parent run id maps back to the parent's job
            _event("START", "other@1", "c2", parent=("?", "p1"), parent_job_in_facet=False),
            # a parent run never seen and no job in the facet: no edge
            _event("START", "orphan@1", "c3", parent=("?", "unknown"), parent_job_in_facet=False),
        ]
    )
    assert g.parent_edges == sorted(
        [Edge(_job("parent@1"), _job("child@1"), "parent"), Edge(_job("parent@1"), _job("other@1"), "parent")]
    )


def test_failed_jobs_are_marked_and_final_state_is_the_terminal_event() -> None:
    g = build_graph(
        [
            _event("START", "a@1", "r1"),
            _event("FAIL", "a@1", "r1"),
            _event("START", "a@1", "r1"),  # a replayed START after the terminal event
            _event("START", "b@1", "r2"),
            _event("ABORT", "b@1", "r2"),
            _event("START", "c@1", "r3"),  # still open
        ]
    )
    assert g.run_states == {"r1": "FAIL", "r2": "ABORT", "r3": "START"}
    assert g.jobs[_job("a@1")].failed
    assert not g.jobs[_job("b@1")].failed
    assert g.summary()["failed_jobs"] == 1
    dot = to_dot(g)
    assert '"job:engine://prod:a@1" [shape=box' in dot
    assert "#c00000" in dot.split('"job:engine://prod:a@1"')[1].split("\n")[0]
    assert "#c00000" not in dot.split('"job:engine://prod:b@1"')[1].split("\n")[0]


def test_dot_quotes_names_with_quotes_backslashes_and_non_ascii() -> None:
    g = build_graph([_event("COMPLETE", 'we"ird\\jöb', "r1", outputs=["täble"])])
    dot = to_dot(g)
    assert '"job:engine://prod:we\\"ird\\\\jöb"' in dot
    assert "täble" in dot
    assert dot.startswith("digraph lineage {") and dot.rstrip().endswith("}")


def test_events_without_job_or_run_are_skipped() -> None:
    g = build_graph([{"eventType": "START"}, {"job": {"namespace": NS, "name": "x"}, "run": {}}])
    assert not g.jobs
    assert not g.run_states


def test_load_events_reads_jsonl_and_names_the_bad_line(tmp_path: Path) -> None:
    good = tmp_path / "ok.jsonl"
    good.write_text(
        json.dumps(_event("START", "a", "r")) + "\n\n" + json.dumps(_event("COMPLETE", "a", "r")) + "\n"
    )
    assert [e["eventType"] for e in load_events(good)] == ["START", "COMPLETE"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_event("START", "a", "r")) + "\n{not json\n")
    with pytest.raises(OlstreamError, match=r"bad.jsonl:2"):
        load_events(bad)
    with pytest.raises(ConfigError):
        load_events(tmp_path / "missing.jsonl")


def test_output_format_comes_from_the_suffix() -> None:
    assert format_of(Path("a.svg")) == "svg"
    assert format_of(Path("a.PNG")) == "png"
    assert format_of(Path("a.html")) == "html"
    with pytest.raises(ConfigError):
        format_of(Path("a.pdf"))


def test_html_page_embeds_the_svg_and_the_summary() -> None:
    g = build_graph([_event("COMPLETE", "a", "r", outputs=["o"])])
    page = html_page("<svg></svg>", g, "t <1>")
    assert "<svg></svg>" in page
    assert "t &lt;1&gt;" in page
    assert "<td>datasets</td><td>1</td>" in page


def test_open_runs_are_drawn_with_the_datasets_their_running_events_carried() -> None:
    g = build_graph(
        [
            _event("START", "etl", "r1"),
            _event("RUNNING", "etl", "r1", inputs=["raw"]),
            _event("RUNNING", "etl", "r1", outputs=["clean"]),
            _event("START", "load", "r2"),
            _event("COMPLETE", "load", "r2", inputs=["clean"]),
        ]
    )
    assert g.open_runs == ["r1"] and g.open_jobs == {_job("etl")}
    assert g.open_edges == {Edge(_ds("raw"), _job("etl"), "read"), Edge(_job("etl"), _ds("clean"), "write")}
    s = g.summary()
    assert (s["open_runs"], s["open_runs_with_datasets"], s["finished_runs"]) == (1, 1, 1)
    dot = to_dot(g)
    assert 'label="reads, running", style=dashed' in dot and 'label="writes, running", style=dashed' in dot
    assert dot.count('label="reads"') == 1  # clean -> load: a finished run's edge, drawn as before
    etl = next(line for line in dot.splitlines() if line.startswith(f'  "job:{NS}:etl"'))
    assert 'style="dashed,filled"' in etl and "1 open" in etl


def test_an_edge_a_finished_run_has_too_is_not_drawn_as_running() -> None:
    g = build_graph(
        [
            _event("START", "etl", "r1"),
            _event("COMPLETE", "etl", "r1", inputs=["raw"]),
            _event("START", "etl", "r2"),
            _event("RUNNING", "etl", "r2", inputs=["raw"]),
        ]
    )
    assert g.open_runs == ["r2"] and g.open_edges == set()
    assert "running" not in to_dot(g).replace("runs still open", "")
