"""Every metric the alert rules and the dashboard (deploy/) select is one the services export, with
labels it has; every metric the services export is in docs/operations.md's tables."""

from __future__ import annotations

import re

import pytest

from tests.support.paths import REPO
from tests.support.promql import (
    BUILTIN,
    Expression,
    Selector,
    dashboard,
    dashboard_expressions,
    documented_metrics,
    exported_metrics,
    parse,
    rule_expressions,
)

OPERATIONS = REPO / "docs" / "operations.md"
TARGET_LABELS = {"job", "instance"}  # added by Prometheus to every scraped series


def label_names(metric: str) -> set[str]:
    """What a series of `metric` can carry: its labels as documented (checked against the registry
    below), the scrape's, and `le` for a histogram's buckets."""
    if metric in BUILTIN:
        return BUILTIN[metric]
    base = re.sub(r"_(bucket|sum|count)$", "", metric)
    documented = documented_metrics(OPERATIONS)
    labels = documented.get(metric, documented.get(base, set()))
    return labels | TARGET_LABELS | ({"le"} if metric.endswith("_bucket") else set())


def problems(expr: Expression) -> list[str]:
    exported = exported_metrics()
    found = []
    for sel in expr.selectors:
        if sel.metric not in exported and sel.metric not in BUILTIN:
            found.append(f"{expr.where}: {sel.metric} is not exported by any service")
            continue
        for label, op, value in sel.matchers:
            if label not in label_names(sel.metric):
                found.append(f"{expr.where}: {sel.metric} has no label {label!r}")
            elif sel.metric in exported and label in exported[sel.metric].values and op in ("=", "=~"):
                values = exported[sel.metric].values[label]  # children exported from the start
                if not any(re.fullmatch(value, v) for v in values):
                    found.append(
                        f"{expr.where}: {sel.metric}{{{label}{op}{value!r}}} matches none of {values}"
                    )
    allowed = set().union(*(label_names(s.metric) for s in expr.selectors)) if expr.selectors else set()
    found += [
        f"{expr.where}: no metric of it has label {g!r}" for g in sorted(expr.grouping_labels - allowed)
    ]
    return found


def test_every_metric_the_rules_select_is_exported_with_its_labels() -> None:
    expressions = rule_expressions()
    assert len(expressions) >= 10
    assert [p for e in expressions for p in problems(e)] == []


def test_every_metric_the_dashboard_selects_is_exported_with_its_labels() -> None:
    expressions = dashboard_expressions()
    assert len(expressions) >= 20
    assert [p for e in expressions for p in problems(e)] == []


def test_every_dashboard_legend_names_labels_its_series_have() -> None:
    bad = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            expr = parse(panel["title"], target["expr"])
            named = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
            kept = (
                expr.grouping_labels
                if "by (" in target["expr"]
                else set().union(*(label_names(s.metric) for s in expr.selectors))
            )
            bad += [f"{panel['title']}: legend {{{{{n}}}}}" for n in sorted(named - kept)]
    assert bad == []


@pytest.mark.parametrize(
    ("expr", "expect"),
    [
        ("rate(olstream_sink_delivered[5m])", "olstream_sink_delivered is not exported"),  # no _total
        ("olstream_stream_parent_wait_seconds", "is not exported"),  # a histogram's bare name
        ('olstream_source_errors_total{kind="decoding"}', "matches none of"),
        ('olstream_sink_lag{partition="0"}', "has no label 'partition'"),
        ("sum by (reason) (olstream_sink_retried_total)", "no metric of it has label 'reason'"),
        ("olstream_sink_delivery_failures_total > 0", "is not exported"),
    ],
)
def test_the_check_finds_what_is_not_exported(expr: str, expect: str) -> None:
    assert any(expect in p for p in problems(parse("test", expr)))


def test_the_check_passes_the_exported_forms() -> None:
    for expr in (
        "rate(olstream_sink_delivered_total[5m])",
        "histogram_quantile(0.9, sum by (le) (rate(olstream_stream_parent_wait_seconds_bucket[5m])))",
        'olstream_source_errors_total{kind=~"decode|gap"}',
        "sum by (job, instance, partition) (olstream_stream_input_lag)",
        'up{job="olstream-sink"} == 0',
    ):
        assert problems(parse("test", expr)) == [], expr


def test_every_exported_metric_is_in_the_operations_tables_with_its_labels() -> None:
    documented = documented_metrics(OPERATIONS)
    missing, wrong_labels = [], []
    for name, exp in exported_metrics().items():
        if not name.startswith("olstream_") or name.endswith("_created"):
            continue
        shown = name if name in documented else re.sub(r"_(bucket|sum|count)$", "", name)
        if shown not in documented:
            missing.append(name)
        elif not exp.labels <= documented[shown]:
            wrong_labels.append(f"{name}: {sorted(exp.labels)} not in {sorted(documented[shown])}")
    assert missing == [] and wrong_labels == []
    exported = {re.sub(r"_(bucket|sum|count)$", "", n) for n in exported_metrics()}
    assert set(documented) - exported == set()  # and the tables list nothing the services lack


def test_new_metrics_are_registered() -> None:
    exported = exported_metrics()
    for name, kind in (
        ("olstream_sink_circuit_open", "gauge"),
        ("olstream_stream_input_lag", "gauge"),
        ("olstream_healthy", "gauge"),
    ):
        assert exported[name].kind == kind


def test_parse_finds_selectors_matchers_and_grouping() -> None:
    expr = parse(
        "x",
        'sum by (job, le) (rate(a_total{k=~"x|y", j!="z"}[5m])) / on (job) b unless c{q="a,b"} > 0.5',
    )
    assert expr.selectors == (
        Selector("a_total", (("k", "=~", "x|y"), ("j", "!=", "z"))),
        Selector("b", ()),
        Selector("c", (("q", "=", "a,b"),)),
    )
    assert expr.grouping_labels == {"job", "le"}
