"""Every event the mapping makes validates against the official OpenLineage schemas (and ours)."""

from __future__ import annotations

import json

import pytest

from olstream.contract.records import Direction, RunError, RunRef, RunStatus
from olstream.streams import mapping
from tests.support.openlineage_schema import require_spec, validator
from tests.support.paths import STREAM_SCHEMAS
from tests.support.stream_records import Harness, declared, ended, ref_of, started


@pytest.mark.parametrize("status", list(RunStatus))
def test_events_validate_for_every_status(status: RunStatus) -> None:
    root = started("root", wtype="daily", nominal=True)
    mid = started("mid", wtype="mid", instance="m", offset=1, parent=ref_of(root), principal=None)
    leaf = started("leaf", wtype="leaf", instance="l-ü", offset=2, parent=RunRef("mid"))
    err = RunError("bad ☃", "ValueError", "trace") if status is RunStatus.FAILED else None
    outs = Harness().feed(
        root,
        mid,
        leaf,
        declared("leaf", offset=3, name="日本語.テーブル", version="v9"),
        declared("leaf", offset=4, direction=Direction.OUTPUT, ns="s3://b", name="k/ä.parquet"),
        ended("leaf", offset=5, status=status, error=err),
        ended("mid", offset=6, status=status),
    )
    assert len(outs) == 5
    v = validator()
    for o in outs:
        v.validate(o.value)


def test_facet_schema_urls_are_the_official_ids() -> None:
    spec = require_spec()
    ids = {json.loads(p.read_text())["$id"] for p in (spec / "facets").glob("*.json")}
    for name in dir(mapping):
        if name.endswith("_SCHEMA_URL") and name not in (
            "OPENLINEAGE_SCHEMA_URL",
            "WORKFLOW_FACET_SCHEMA_URL",
        ):
            assert getattr(mapping, name).split("#")[0] in ids, name
    core = json.loads((spec / "OpenLineage.json").read_text())["$id"]
    assert mapping.OPENLINEAGE_SCHEMA_URL.split("#")[0] == core


def test_workflow_facet_schema_is_shipped_under_its_url() -> None:
    doc = json.loads((STREAM_SCHEMAS / "WorkflowRunFacet.json").read_text())
    assert doc["$id"] == mapping.WORKFLOW_FACET_SCHEMA_URL
    assert doc["properties"]["workflow"] == {"$ref": "#/$defs/WorkflowRunFacet"}
    statuses = doc["$defs"]["WorkflowRunFacet"]["allOf"][1]["properties"]["status"]["enum"]
    assert set(statuses) == {s.value for s in RunStatus}
