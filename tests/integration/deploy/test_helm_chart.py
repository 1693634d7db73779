"""deploy/helm/olstream with a real helm: `helm lint` and `helm template` under each values file of
the chart's ci/ folder, every rendered object validated offline against the Kubernetes API schemas
of KUBE_VERSION (kubernetes-validate), and the Strimzi and Prometheus Operator objects against the
schemas in schemas/ (written from those projects' API references: their CRDs are not reachable
here). What the rendered pods do when they run is tests/integration/deploy/test_helm_pods.py."""

from __future__ import annotations

import json
import math
import tarfile
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from olstream.connectors.sink.settings import SINK_SETTINGS
from olstream.connectors.source.settings import SOURCE_SETTINGS
from olstream.shared.config import SHARED
from olstream.streams.settings import WORKER_SETTINGS
from tests.support.helm_chart import (
    CHART,
    KUBE_VERSION,
    RELEASE,
    VALUES,
    by_kind,
    config_file,
    helm,
    one,
    render,
    workloads,
)
from tests.support.stream_support import REPO

SCHEMAS = Path(__file__).parent / "schemas"
CUSTOM_KINDS = {
    ("kafka.strimzi.io/v1beta2", "KafkaTopic"),
    ("kafka.strimzi.io/v1beta2", "KafkaUser"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
SECTION_KEYS = {
    "source": {s.key for s in SOURCE_SETTINGS},
    "worker": {s.key for s in WORKER_SETTINGS},
    "sink": {s.key for s in SINK_SETTINGS},
}
RULES = REPO / "deploy" / "prometheus" / "olstream-rules.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "olstream-dashboard.json"

pytestmark = pytest.mark.integration


def ids(paths: list[Path]) -> list[str]:
    return [p.name.removesuffix("-values.yaml") for p in paths]


def test_there_are_the_four_values_files() -> None:
    assert ids(VALUES) == ["metrics", "mtls", "plain", "scram-strimzi"]


@pytest.mark.parametrize("values", VALUES, ids=ids(VALUES))
def test_helm_lint_passes_strict(values: Path) -> None:
    done = helm("lint", str(CHART), "--strict", "-f", str(values), "--kube-version", KUBE_VERSION)
    assert "0 chart(s) failed" in done.stdout, done.stdout


def _custom_schema(obj: dict[str, Any]) -> dict[str, Any]:
    group = obj["apiVersion"].replace("/", "-")
    loaded = json.loads((SCHEMAS / f"{obj['kind'].lower()}-{group}.json").read_text())
    assert isinstance(loaded, dict)
    return loaded


@pytest.mark.parametrize("values", VALUES, ids=ids(VALUES))
def test_every_rendered_object_is_valid_for_its_api(values: Path) -> None:
    objects = render(values)
    assert objects
    for obj in objects:
        where = f"{obj['kind']} {obj['metadata']['name']}"
        if (obj["apiVersion"], obj["kind"]) in CUSTOM_KINDS:
            jsonschema.validate(obj, _custom_schema(obj))
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{where}: {e.message} at {list(e.path)}") from e


def test_the_validation_fails_on_an_invalid_object() -> None:
    """The checks above can fail: a misspelt field, and a KafkaUser ACL operation Strimzi lacks."""
    objects = render(VALUES[-1])
    deployment = dict(workloads(objects)[0])
    deployment["spec"] = {**deployment["spec"], "replica": 1}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)
    user = by_kind(objects, "KafkaUser")[0]
    bad = json.loads(json.dumps(user))
    bad["spec"]["authorization"]["acls"][0]["operations"] = ["Reed"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, _custom_schema(bad))


@pytest.mark.parametrize("values", VALUES, ids=ids(VALUES))
def test_the_config_file_names_only_settings_the_commands_declare(values: Path) -> None:
    """A key a command does not declare is ignored by it (docs/configuration.md): a misspelt one in
    the chart or a values file would silently do nothing."""
    doc = config_file(render(values))
    shared = {s.key for s in SHARED}
    for key, value in doc.items():
        if key in SECTION_KEYS:
            assert isinstance(value, dict)
            unknown = set(value) - SECTION_KEYS[key]
            assert not unknown, f"section {key}: {sorted(unknown)} are not settings of olstream {key}"
        else:
            assert key in shared, f"top-level key {key}: only {sorted(shared)} may be there"


@pytest.mark.parametrize("values", VALUES, ids=ids(VALUES))
def test_pods_run_as_the_image_user_read_only_with_probes_and_a_grace_period(values: Path) -> None:
    objects = render(values)
    doc = config_file(objects)
    for workload in workloads(objects):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001  # the Dockerfile's useradd --uid
        (container,) = pod["containers"]
        command = container["args"][0]
        section = doc[command]
        ctx = container["securityContext"]
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert "/tmp" in mounts and not mounts["/tmp"].get("readOnly")
        if command == "worker":
            assert section["data_dir"] in mounts
            assert workload["kind"] == "StatefulSet"
            (claim,) = workload["spec"]["volumeClaimTemplates"]
            assert claim["metadata"]["name"] == mounts[section["data_dir"]]["name"]
        port = section["metrics_port"]
        assert container["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, probe
        stop = float(section.get("stop_timeout", 30.0))
        assert pod["terminationGracePeriodSeconds"] > math.ceil(stop)


def test_the_worker_and_the_sinks_have_disruption_budgets() -> None:
    objects = render(VALUES[-1])  # scram-strimzi: two workers, a receiver with two sinks
    budgets = {o["metadata"]["name"]: o for o in by_kind(objects, "PodDisruptionBudget")}
    assert set(budgets) == {f"{RELEASE}-olstream-worker", f"{RELEASE}-olstream-sink-marquez"}
    for budget in budgets.values():
        target = one(objects, "StatefulSet" if "worker" in budget["metadata"]["name"] else "Deployment",
                     budget["metadata"]["name"])  # fmt: skip
        assert budget["spec"]["selector"]["matchLabels"] == target["spec"]["selector"]["matchLabels"]
    source = one(objects, "Deployment", f"{RELEASE}-olstream-source")
    assert source["spec"]["replicas"] == 1 and source["spec"]["strategy"]["type"] == "Recreate"


def test_strimzi_defaults_bootstrap_and_ca_and_one_user_per_component() -> None:
    objects = render(VALUES_BY_ID["scram-strimzi"])
    doc = config_file(objects)
    assert doc["bootstrap"] == "lineage-kafka-kafka-bootstrap:9093"
    for section in ("source", "worker", "sink"):
        assert doc[section]["kafka_security_protocol"] == "SASL_SSL"
        assert doc[section]["kafka_sasl_mechanism"] == "SCRAM-SHA-512"
        assert doc[section]["kafka_sasl_username"] == f"{RELEASE}-olstream-{section}"
        assert doc[section]["kafka_ssl_ca"] == "/etc/olstream/kafka-ca/ca.crt"
    users = {u["metadata"]["name"] for u in by_kind(objects, "KafkaUser")}
    assert users == {f"{RELEASE}-olstream-{c}" for c in ("source", "worker", "sink")}
    for workload in workloads(objects):
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        assert volumes["kafka-ca"]["secret"]["secretName"] == "lineage-kafka-cluster-ca-cert"
    mtls = config_file(render(VALUES_BY_ID["mtls"]))
    assert mtls["worker"]["kafka_security_protocol"] == "SSL"
    assert mtls["worker"]["kafka_ssl_cert"] == "/etc/olstream/kafka-user/user.crt"
    assert "kafka_sasl_username" not in mtls["worker"]


def test_topics_cover_the_internal_ones_with_their_sizes() -> None:
    objects = render(VALUES_BY_ID["scram-strimzi"])
    topics = {t["spec"]["topicName"]: t["spec"] for t in by_kind(objects, "KafkaTopic")}
    assert set(topics) == {
        "olstream.eventlog", "olstream.eventlog.errors", "olstream.eventlog.offsets",
        "olstream-worker-runs-changelog", "olstream-worker-__assignor-__leader",
        "openlineage.events", "olstream.stream.errors",
        "openlineage.events.dlq.marquez", "openlineage.events.dlq.audit",
    }  # fmt: skip
    assert topics["olstream-worker-runs-changelog"]["partitions"] == 8  # the input's
    assert topics["olstream-worker-runs-changelog"]["config"]["cleanup.policy"] == "compact"
    assert all("max.message.bytes" in t["config"] for t in topics.values())


def test_the_prometheus_rule_and_the_dashboard_are_the_files_in_deploy() -> None:
    """One source: the chart's files/ are copies of deploy/prometheus and deploy/grafana
    (tests/unit/deploy/test_chart_files.py); helm reads them never through `tpl`: the rules'
    {{ $labels.instance }} arrive as Prometheus wrote them."""
    for copy, source in (("olstream-rules.yml", RULES), ("olstream-dashboard.json", DASHBOARD)):
        path = CHART / "files" / copy
        assert not path.is_symlink() and path.read_bytes() == source.read_bytes()
    objects = render(VALUES_BY_ID["metrics"])
    (rule,) = by_kind(objects, "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    assert "{{ $labels.instance }}" in json.dumps(rule["spec"])
    dashboard = one(objects, "ConfigMap", f"{RELEASE}-olstream-dashboard")
    assert json.loads(dashboard["data"]["olstream-dashboard.json"]) == json.loads(DASHBOARD.read_text())
    (monitor,) = by_kind(objects, "PodMonitor")
    assert monitor["spec"]["jobLabel"] == "olstream.io/job"
    jobs = {w["spec"]["template"]["metadata"]["labels"]["olstream.io/job"] for w in workloads(objects)}
    assert jobs == {"olstream-source", "olstream-worker", "olstream-sink"}  # up{job=~"olstream.*"}


def test_the_packaged_chart_carries_the_files_and_renders_the_same(tmp_path: Path) -> None:
    helm("package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("olstream-*.tgz")
    with tarfile.open(archive) as tar:
        member = tar.getmember("olstream/files/olstream-rules.yml")
        assert member.isfile()
        extracted = tar.extractfile(member)
        assert extracted is not None and extracted.read() == RULES.read_bytes()
    assert render(VALUES_BY_ID["metrics"], chart=archive) == render(VALUES_BY_ID["metrics"])


def test_a_bad_value_is_refused_with_its_name() -> None:
    done = helm("template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION, "-f",
                str(VALUES_BY_ID["plain"]), "--set", "sink.receivers.Bad_Name.transport.type=http",
                check=False)  # fmt: skip
    assert done.returncode != 0 and "Bad_Name" in done.stderr
    done = helm("template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION, check=False)
    assert done.returncode != 0 and "kafka.bootstrap is required" in done.stderr


VALUES_BY_ID = dict(zip(ids(VALUES), VALUES, strict=True))
