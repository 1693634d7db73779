"""The PromQL of deploy/: the rules' and the dashboard's expressions, and the series they select.

A small reader, enough for the expressions we write (selectors, label matchers, `by`/`on` clauses,
functions): it finds every metric an expression selects and every label it names, so a test can
check them against what the services register.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import REPO

RULES = REPO / "deploy" / "prometheus" / "olstream-rules.yml"
RULES_TEST = REPO / "deploy" / "prometheus" / "olstream-rules.test.yml"
SCRAPE_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "olstream-dashboard.json"

FUNCTIONS = {
    "sum", "min", "max", "avg", "count", "rate", "irate", "increase", "deriv", "delta", "idelta",
    "histogram_quantile", "min_over_time", "max_over_time", "avg_over_time", "absent", "topk",
    "bottomk", "clamp_min", "clamp_max", "time", "vector", "scalar", "abs", "label_replace",
}  # fmt: skip
KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
}
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
SELECTOR = re.compile(r"(?<![\w:.])([a-zA-Z_:][\w:]*)\s*(\{[^}]*\})?")
MATCHER = re.compile(r'([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Selector:
    metric: str
    matchers: tuple[tuple[str, str, str], ...]  # (label, operator, value)


@dataclass(frozen=True)
class Expression:
    where: str  # the alert's name or the panel's title
    text: str
    selectors: tuple[Selector, ...]
    grouping_labels: frozenset[str]  # labels of by/without/on/ignoring clauses


def parse(where: str, text: str) -> Expression:
    """The selectors and grouping labels of one PromQL expression."""
    strings: list[str] = []

    def keep(m: re.Match[str]) -> str:
        strings.append(m.group(0))
        return f"\0{len(strings) - 1}\0"

    s = re.sub(r'"(?:[^"\\]|\\.)*"', keep, text)
    s = re.sub(r"\[[^\]]*\]", " ", s)  # range and subquery windows, $__rate_interval
    grouping: set[str] = set()
    for _kind, labels in GROUPING.findall(s):
        grouping |= {label.strip() for label in labels.split(",") if label.strip()}
    s = GROUPING.sub(" ", s)
    selectors = []
    for m in SELECTOR.finditer(s):
        name, braces = m.group(1), m.group(2)
        rest = s[m.end() :].lstrip()
        if name in KEYWORDS or (name in FUNCTIONS and rest.startswith("(")) or rest.startswith("("):
            continue
        matchers: tuple[tuple[str, str, str], ...] = ()
        if braces:
            restored = re.sub(r"\0(\d+)\0", lambda k: strings[int(k.group(1))], braces)
            matchers = tuple((label, op, value) for label, op, value in MATCHER.findall(restored))
        selectors.append(Selector(name, matchers))
    return Expression(where, text, tuple(selectors), frozenset(grouping))


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def rule_expressions() -> list[Expression]:
    return [parse(rule["alert"], rule["expr"]) for rule in rules()]


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return doc


def dashboard_expressions() -> list[Expression]:
    out = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            out.append(parse(f"panel {panel['title']!r}", target["expr"]))
    return out


def documented_metrics(doc: Path) -> dict[str, set[str]]:
    """The metrics of the tables of a docs page: name (as exposed) -> its label names."""
    out: dict[str, set[str]] = {}
    for m in re.finditer(r"^\| `([a-z_]+)(?:\{([a-z_, ]+)\})?` \|", doc.read_text(encoding="utf-8"), re.M):
        out.setdefault(m.group(1), set()).update(
            x.strip() for x in (m.group(2) or "").split(",") if x.strip()
        )
    return out


# The modules each service runs from (`olstream source|worker|sink` import them): importing them
# registers every metric the services define on prometheus_client's default registry.
SERVICE_MODULES = (
    "olstream.shared.metrics",
    "olstream.connectors.source.run",
    "olstream.streams.runtime.agent",
    "olstream.connectors.sink.run",
)
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}
BUILTIN = {  # series Prometheus makes itself, with their labels
    "up": {"job", "instance"},
    "ALERTS": {"alertname", "alertstate", "severity", "job", "instance"},
}


@dataclass(frozen=True)
class Exported:
    family: str  # the name as registered (a counter's without `_total`)
    kind: str  # counter, gauge, histogram, ...
    labels: frozenset[str]  # label names of the samples it has now (none: no child yet)
    values: dict[str, frozenset[str]]  # label -> values of the samples it has now


def exported_metrics() -> dict[str, Exported]:
    """Every series name the services expose, from prometheus_client's public `REGISTRY.collect()`:
    a counter as `_total` (and `_created`), a histogram as `_bucket`, `_sum`, `_count`."""
    import importlib

    from prometheus_client import REGISTRY

    for module in SERVICE_MODULES:
        importlib.import_module(module)
    out: dict[str, Exported] = {}
    for family in REGISTRY.collect():
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        values = {k: frozenset(s.labels[k] for s in family.samples if k in s.labels) for k in labels}
        exported = Exported(family.name, family.type, frozenset(labels), values)
        for suffix in SUFFIXES.get(family.type, ("",)):
            out[family.name + suffix] = exported
    return out
