"""Validate RunEvents against the official OpenLineage JSON Schemas in ../shared/openlineage-spec/.

Every facet schema is registered under its `$id` (offline), the core RunEvent is
validated, then each run, job and dataset facet map against the facet file that
defines it. Custom facets (olstream's `workflow`) are validated against the
schema olstream ships. Where the spec folder is absent, `require_spec()` skips.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest

SPEC_ENV = "OLSTREAM_OPENLINEAGE_SPEC"


def spec_dir() -> Path | None:
    env = os.environ.get(SPEC_ENV)
    candidates = [Path(env)] if env else []
    here = Path(__file__).resolve()
    candidates += [p / "shared" / "openlineage-spec" for p in here.parents]
    for c in candidates:
        if (c / "OpenLineage.json").is_file():
            return c
    return None


def require_spec() -> Path:
    d = spec_dir()
    if d is None:
        pytest.skip(
            "OpenLineage spec schemas not found (../shared/openlineage-spec/ or $OLSTREAM_OPENLINEAGE_SPEC): "
            "schema validation needs the vendored official schemas"
        )
    return d


class OpenLineageValidator:
    def __init__(self, spec: Path, extra_schemas: list[dict[str, Any]] | None = None) -> None:
        from jsonschema import Draft202012Validator
        from referencing import Registry, Resource

        docs = [json.loads((spec / "OpenLineage.json").read_text())]
        docs += [json.loads(p.read_text()) for p in sorted((spec / "facets").glob("*.json"))]
        docs += extra_schemas or []
        registry: Registry[Any] = Registry().with_resources(
            (d["$id"], Resource.from_contents(d)) for d in docs
        )
        # facet key -> validator of the facet file's root schema (validates the facets map)
        self.facet_validators: dict[str, Any] = {}
        checker = Draft202012Validator.FORMAT_CHECKER
        for d in docs[1:]:
            for key in d.get("properties", {}):
                self.facet_validators[key] = Draft202012Validator(
                    d, registry=registry, format_checker=checker
                )
        core = docs[0]
        self.core = Draft202012Validator(
            {"$ref": core["$id"] + "#/$defs/RunEvent"}, registry=registry, format_checker=checker
        )

    def errors(self, event: dict[str, Any]) -> list[str]:
        out = [f"core: {e.message} at {list(e.absolute_path)}" for e in self.core.iter_errors(event)]
        maps: list[tuple[str, dict[str, Any]]] = [
            ("run", event.get("run", {}).get("facets", {})),
            ("job", event.get("job", {}).get("facets", {})),
        ]
        for side in ("inputs", "outputs"):
            for ds in event.get(side, []):
                maps.append((f"{side} dataset", ds.get("facets", {})))
                maps.append((f"{side} dataset", ds.get("inputFacets", ds.get("outputFacets", {}))))
        for where, facets in maps:
            for key, value in facets.items():
                v = self.facet_validators.get(key)
                if v is None:
                    out.append(f"{where} facet {key!r} has no schema to validate against")
                    continue
                out += [f"{where} facet {key}: {e.message}" for e in v.iter_errors({key: value})]
        return out

    def validate(self, event: dict[str, Any] | bytes | str) -> None:
        doc = json.loads(event) if isinstance(event, bytes | str) else event
        errs = self.errors(doc)
        assert not errs, "invalid OpenLineage event:\n  " + "\n  ".join(errs) + f"\n{json.dumps(doc)[:2000]}"


def project_facet_schemas() -> list[dict[str, Any]]:
    """The JSON Schemas of olstream's own custom facets (shipped inside the package)."""
    root = Path(__file__).resolve().parents[2] / "streams" / "schemas"
    return [json.loads(p.read_text()) for p in sorted(root.glob("*.json"))] if root.is_dir() else []


@cache
def validator() -> OpenLineageValidator:
    return OpenLineageValidator(require_spec(), project_facet_schemas())
