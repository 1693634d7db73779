"""deploy/prometheus: `promtool check` and `promtool test rules` pass, and every rule carries a severity,
a summary, a description and a runbook entry that exists in docs/operations.md."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO
from tests.support.promql import RULES, RULES_TEST, SCRAPE_CONFIG, rules

OPERATIONS = REPO / "docs" / "operations.md"


def promtool(*args: str, cwd: Path = RULES.parent) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian's prometheus package; `make setup` installs it)")
    return subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return out


def test_promtool_checks_the_rules_and_the_scrape_config() -> None:
    checked = promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout
    config = promtool("check", "config", SCRAPE_CONFIG.name)
    assert config.returncode == 0, config.stdout + config.stderr


def test_promtool_rule_unit_tests_pass() -> None:
    tested = promtool("test", "rules", RULES_TEST.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    doc = yaml.safe_load(RULES_TEST.read_text(encoding="utf-8"))
    fired = {
        case["alertname"]
        for test in doc["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert {r["alert"] for r in rules()} - fired == set()


def test_promtool_rule_unit_tests_can_fail(tmp_path: Path) -> None:
    broken = RULES.read_text(encoding="utf-8").replace(
        "olstream_sink_circuit_open == 1", "olstream_sink_circuit_open == 2"
    )
    (tmp_path / RULES.name).write_text(broken, encoding="utf-8")
    (tmp_path / RULES_TEST.name).write_text(RULES_TEST.read_text(encoding="utf-8"), encoding="utf-8")
    tested = promtool("test", "rules", RULES_TEST.name, cwd=tmp_path)
    assert tested.returncode != 0 and "OlstreamSinkCircuitOpen" in tested.stdout + tested.stderr


def test_every_rule_has_severity_annotations_and_a_runbook_entry() -> None:
    documented = anchors(OPERATIONS.read_text(encoding="utf-8"))
    for rule in rules():
        name = rule["alert"]
        assert re.fullmatch(r"Olstream[A-Z]\w+", name), name
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], name
        assert notes["runbook_url"] == f"docs/operations.md#{name.lower()}", name
        assert name.lower() in documented, f"docs/operations.md has no heading {name}"
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "0m")), name


def test_anchors_follow_github() -> None:
    assert anchors("## Alerts and dashboard\n#### `OlstreamSinkCircuitOpen`\n") == {
        "alerts-and-dashboard",
        "olstreamsinkcircuitopen",
    }
