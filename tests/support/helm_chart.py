"""The Helm chart deploy/helm/olstream rendered by a real helm (infra/tools/helm.sh builds it once).

`helm_binary()` skips the calling test only when helm is not cached and cannot be built (no Go);
`render(values, sets)` is `helm template` of the chart, as parsed objects; `notes(values, sets)`
the chart's NOTES.txt as `helm install` would print it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.stream_support import REPO

CHART = REPO / "deploy" / "helm" / "olstream"
VALUES_DIR = CHART / "ci"
VALUES = sorted(VALUES_DIR.glob("*-values.yaml"))
HELM_SCRIPT = REPO / "infra" / "tools" / "helm.sh"
KUBE_VERSION = "1.32.0"  # the Kubernetes API the objects are validated against (kubernetes-validate)
RELEASE = "lineage"
CANNOT_BUILD = 3  # infra/tools/helm.sh: not cached, and no Go (a failed build is a failure)

_helm: Path | None = None


def helm_binary() -> Path:
    global _helm
    if _helm is None:
        done = subprocess.run([str(HELM_SCRIPT)], capture_output=True, text=True, timeout=1800)
        if done.returncode == CANNOT_BUILD:
            pytest.skip(f"helm is not cached and cannot be built here: {done.stderr.strip()}")
        assert done.returncode == 0, f"{HELM_SCRIPT} exited {done.returncode}:\n{done.stderr}"
        _helm = Path(done.stdout.strip().splitlines()[-1])
    return _helm


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, timeout=120)
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done


def set_args(sets: dict[str, str] | None) -> list[str]:
    out: list[str] = []
    for key, value in (sets or {}).items():
        out += ["--set-string", f"{key}={value}"]
    return out


def template_args(values: Path | None, sets: dict[str, str] | None, chart: Path = CHART) -> list[str]:
    args = ["template", RELEASE, str(chart), "--namespace", "lineage", "--kube-version", KUBE_VERSION]
    if values is not None:
        args += ["-f", str(values)]
    return args + set_args(sets)


def render(
    values: Path | None, sets: dict[str, str] | None = None, chart: Path = CHART
) -> list[dict[str, Any]]:
    """Every object `helm template` renders (in its order), as dicts."""
    done = helm(*template_args(values, sets, chart))
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def notes(values: Path | None, sets: dict[str, str] | None = None) -> str:
    """templates/NOTES.txt rendered with the values (`helm template` leaves it out, and `helm install
    --dry-run` wants a cluster): a copy of the chart where it is a named template, rendered into a
    document of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "olstream"
        shutil.copytree(CHART, chart)
        text = (chart / "templates" / "NOTES.txt").read_text()
        (chart / "templates" / "_notes.tpl").write_text(
            '{{- define "test.notes" -}}\n' + text + "{{- end -}}\n"
        )
        (chart / "templates" / "zz-notes.yaml").write_text('notes: {{ include "test.notes" . | toJson }}\n')
        done = helm(*template_args(values, sets, chart), "--show-only", "templates/zz-notes.yaml")
    doc = yaml.safe_load(done.stdout)
    assert isinstance(doc, dict) and isinstance(doc["notes"], str)
    return doc["notes"]


def overlay(tmp: Path, values: Path, more: dict[str, Any]) -> Path:
    """A values file: `values` with `more` merged over it (mappings merged, anything else replaced)."""

    def merged(base: Any, top: Any) -> Any:
        if isinstance(base, dict) and isinstance(top, dict):
            return {**base, **{k: merged(base.get(k), v) for k, v in top.items()}}
        return top

    path = tmp / f"{values.stem}-overlay.yaml"
    path.write_text(yaml.safe_dump(merged(yaml.safe_load(values.read_text()), more)))
    return path


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


def workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]


def pod_specs(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(name, pod spec) of every workload's pod template and every bare Pod (the helm test's)."""
    out = [(w["metadata"]["name"], w["spec"]["template"]["spec"]) for w in workloads(objects)]
    return out + [(p["metadata"]["name"], p["spec"]) for p in objects if p["kind"] == "Pod"]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    """A container's plain environment values (those from a Secret or a field left out)."""
    return {v["name"]: v["value"] for v in container.get("env", []) if "value" in v}


def config_file(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The rendered olstream.yml (the ConfigMap the pods mount)."""
    cm = one(objects, "ConfigMap", f"{RELEASE}-olstream")
    doc = yaml.safe_load(cm["data"]["olstream.yml"])
    assert isinstance(doc, dict)
    return doc
