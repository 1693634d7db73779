"""deploy/helm/olstream with a real helm: `helm lint` and `helm template` under each values file of
the chart's ci/ folder, every rendered object validated offline against the Kubernetes API schemas
of KUBE_VERSION (kubernetes-validate), and the Strimzi and Prometheus Operator objects against the
schemas in schemas/ (written from those projects' API references: their CRDs are not reachable
here; Strimzi's v1 API is its v1beta2 without the deprecated fields, which the chart does not use,
so the v1 objects are validated against the v1beta2 schemas with their apiVersion). The schema of
the values (values.schema.json), the ServiceAccount, the pods' scheduling settings, the `helm test`
pod and NOTES.txt are checked here too. What the rendered pods do when they run is
tests/integration/deploy/test_helm_pods.py."""

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
from olstream.operations.settings import ERRORS_LIST, ERRORS_REDRIVE, EXPLAIN
from olstream.shared.config import SHARED
from olstream.streams.settings import WORKER_SETTINGS
from tests.support.helm_chart import (
    CHART,
    KUBE_VERSION,
    RELEASE,
    VALUES,
    by_kind,
    config_file,
    env_of,
    helm,
    notes,
    one,
    overlay,
    pod_specs,
    render,
    workloads,
)
from tests.support.stream_support import REPO

SCHEMAS = Path(__file__).parent / "schemas"
STRIMZI_VERSIONS = ("v1", "v1beta2")
CUSTOM_KINDS = {
    *((f"kafka.strimzi.io/{v}", kind) for v in STRIMZI_VERSIONS for kind in ("KafkaTopic", "KafkaUser")),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
SECTION_KEYS = {
    "source": {s.key for s in SOURCE_SETTINGS},
    "worker": {s.key for s in WORKER_SETTINGS},
    "sink": {s.key for s in SINK_SETTINGS},
    "explain": {s.key for s in EXPLAIN},
    "errors": {s.key for s in (*ERRORS_LIST, *ERRORS_REDRIVE)},
}
KAFKA_CLIENT_KEYS = (
    "kafka_config", "kafka_security_protocol", "kafka_sasl_mechanism", "kafka_sasl_username",
    "kafka_ssl_ca", "kafka_ssl_cert", "kafka_ssl_key", "kafka_ssl_endpoint_identification",
)  # fmt: skip
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
    api = obj["apiVersion"]
    # kafka.strimzi.io/v1: the v1beta2 schema with its apiVersion (see the module's docstring)
    written = "kafka.strimzi.io/v1beta2" if api == "kafka.strimzi.io/v1" else api
    loaded = json.loads((SCHEMAS / f"{obj['kind'].lower()}-{written.replace('/', '-')}.json").read_text())
    assert isinstance(loaded, dict)
    loaded["properties"]["apiVersion"] = {"const": api}
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
    assert done.returncode != 0 and "at '/kafka': missing property 'bootstrap'" in done.stderr


def _template_error(*args: str) -> str:
    done = helm("template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION, *args, check=False)
    assert done.returncode != 0, done.stdout[:2000]
    return done.stderr


def test_the_default_values_stop_on_the_schema_naming_what_is_missing() -> None:
    """values.schema.json, before any template renders: the bootstrap (unless Strimzi) and the
    source's event log are required; types and enums are checked."""
    err = _template_error()
    assert "values don't meet the specifications of the schema" in err
    assert "at '/kafka': missing property 'bootstrap'" in err
    assert "at '/source/logUrlSecret': missing property 'name'" in err
    assert "at '/config/source': missing property 'log_url'" in err
    plain = str(VALUES_BY_ID["plain"])
    refusals = {
        "kafka.authentication=plain": "/kafka/authentication",
        "strimzi.apiVersion=v1alpha1": "/strimzi/apiVersion",
        "tests.kafkaUser=admin": "/tests/kafkaUser",
        "worker.replicas=two": "/worker/replicas",
        "config.worker.data_dir=data": "/config/worker/data_dir",
        "config.source.partitions=many": "/config/source/partitions",
        "sink.receivers.marquez.transport.type=kafka": "/sink/receivers/marquez/transport/type",
    }
    for value, where in refusals.items():
        assert f"at '{where}'" in _template_error("-f", plain, "--set", value), value
    err = _template_error("-f", plain, "--set", "strimzi.enabled=true", "--set", "kafka.authentication=none")
    assert "at '/kafka/authentication'" in err  # KafkaUsers need scram-sha-512 or tls
    # what the schema cannot say is still refused by the templates, with the value's name
    err = _template_error("-f", plain, "--set", "kafka.authentication=tls", "--set", "kafka.tls=false")
    assert "kafka.authentication tls needs kafka.tls true" in err


def test_a_service_account_without_its_token(tmp_path: Path) -> None:
    objects = render(VALUES_BY_ID["plain"])
    (account,) = by_kind(objects, "ServiceAccount")
    assert account["metadata"]["name"] == f"{RELEASE}-olstream"
    assert account["automountServiceAccountToken"] is False
    specs = pod_specs(objects)
    assert any(p["kind"] == "Pod" for p in objects)  # the helm test's pod is among them
    for name, spec in specs:
        assert spec["serviceAccountName"] == f"{RELEASE}-olstream", name
        assert spec["automountServiceAccountToken"] is False, name
    role = {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}
    named = overlay(
        tmp_path, VALUES_BY_ID["plain"], {"serviceAccount": {"name": "lineage-sa", "annotations": role}}
    )
    objects = render(named)
    (account,) = by_kind(objects, "ServiceAccount")
    assert account["metadata"]["name"] == "lineage-sa" and account["metadata"]["annotations"] == role
    assert {spec["serviceAccountName"] for _, spec in pod_specs(objects)} == {"lineage-sa"}
    existing = overlay(tmp_path, VALUES_BY_ID["plain"], {"serviceAccount": {"create": False}})
    objects = render(existing, {"serviceAccount.name": "ops"})
    assert not by_kind(objects, "ServiceAccount")
    assert {spec["serviceAccountName"] for _, spec in pod_specs(objects)} == {"ops"}
    objects = render(existing)
    assert {spec["serviceAccountName"] for _, spec in pod_specs(objects)} == {"default"}


def test_each_component_takes_spread_priority_env_from_and_resources(tmp_path: Path) -> None:
    zone = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
    own = {**zone, "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"a": "b"}}}
    more: dict[str, Any] = {}
    for component in ("source", "worker", "sink"):
        more[component] = {
            "topologySpreadConstraints": [zone, own],
            "priorityClassName": f"{component}-priority",
            "envFrom": [{"secretRef": {"name": f"{component}-env"}}, {"configMapRef": {"name": "shared"}}],
        }
    values = overlay(tmp_path, VALUES_BY_ID["scram-strimzi"], more)
    objects = render(values)
    checked = set()
    for workload in workloads(objects):
        spec = workload["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        component = container["args"][0]
        checked.add(component)
        assert spec["priorityClassName"] == f"{component}-priority"
        first, second = spec["topologySpreadConstraints"]
        # without a labelSelector: the pods of this workload (a sink's receiver's own)
        selector = workload["spec"]["selector"]["matchLabels"]
        assert first == {**zone, "labelSelector": {"matchLabels": selector}}
        assert second == own
        assert container["envFrom"][0] == {"secretRef": {"name": f"{component}-env"}}
        kubernetes_validate.validate(workload, KUBE_VERSION, strict=True)
    assert checked == {"source", "worker", "sink"}


def test_every_container_has_the_default_resources() -> None:
    """values.yaml says where each figure comes from (docs/benchmarks.md, the pod test's RSS)."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    objects = render(VALUES_BY_ID["plain"])
    for name, spec in pod_specs(objects):
        (container,) = spec["containers"]
        component = "tests" if container["args"][0] == "status" else container["args"][0]
        resources = container["resources"]
        assert resources == defaults[component]["resources"], name
        assert set(resources["requests"]) == {"cpu", "memory"}, name
        assert set(resources["limits"]) == {"memory"}, name  # no CPU limit: a throttled worker stalls
    worker = defaults["worker"]["resources"]
    assert worker["requests"]["memory"] == "512Mi"  # above the measured peak RSS, 448 MB (benchmarks.md)
    assert worker["limits"]["memory"] == "1Gi"


@pytest.mark.parametrize("values", VALUES, ids=ids(VALUES))
def test_every_pod_carries_its_components_kafka_client_settings(values: Path) -> None:
    """OLSTREAM_KAFKA_BOOTSTRAP and the other OLSTREAM_KAFKA_* of each pod are its section's connection: an
    `olstream` command exec'd there (status, errors, explain: the file gives them none) connects as the pod's
    component; the helm test's pod as tests.kafkaUser's."""
    objects = render(values)
    doc = config_file(objects)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    for name, spec in pod_specs(objects):
        (container,) = spec["containers"]
        command = container["args"][0]
        section = doc[defaults["tests"]["kafkaUser"] if command == "status" else command]
        env = env_of(container)
        assert env["OLSTREAM_KAFKA_BOOTSTRAP"] == section.get("bootstrap", doc["bootstrap"]), name
        expected = {f"OLSTREAM_{k.upper()}": str(section[k]) for k in KAFKA_CLIENT_KEYS if k in section}
        shown = {k: v for k, v in env.items() if k.startswith("OLSTREAM_KAFKA_")}
        shown.pop("OLSTREAM_KAFKA_BOOTSTRAP")  # the bootstrap, asserted above
        assert shown == expected, name
        if section.get("kafka_sasl_mechanism"):
            assert any(v["name"] == "OLSTREAM_KAFKA_SASL_PASSWORD" for v in container["env"]), name


def test_the_app_id_is_the_clis_default_unless_set() -> None:
    cli_default = next(s.default for s in WORKER_SETTINGS if s.key == "app_id")
    assert cli_default == next(s.default for s in EXPLAIN if s.key == "app_id")
    doc = config_file(render(VALUES_BY_ID["plain"]))
    assert doc["worker"]["app_id"] == doc["explain"]["app_id"] == cli_default
    assert "app_id" not in yaml.safe_load((CHART / "values.yaml").read_text())["config"]["worker"]
    explicit = config_file(render(VALUES_BY_ID["scram-strimzi"]))  # sets app_id: olstream-worker
    assert explicit["worker"]["app_id"] == explicit["explain"]["app_id"] == "olstream-worker"


def test_explain_and_errors_find_the_releases_topics_and_every_receivers_dlq() -> None:
    objects = render(VALUES_BY_ID["scram-strimzi"])  # receivers audit and marquez
    doc = config_file(objects)
    topics = {t["spec"]["topicName"] for t in by_kind(objects, "KafkaTopic")}
    dlqs = ["openlineage.events.dlq.audit", "openlineage.events.dlq.marquez"]
    assert doc["explain"] == {
        "records_topic": doc["worker"]["input_topic"],
        "events_topic": doc["sink"]["topic"],
        "app_id": doc["worker"]["app_id"],
        "dlq_topic": ",".join(dlqs),
    }
    errors = doc["errors"]["topics"].split(",")
    assert errors == [f"{doc['source']['topic']}.errors", doc["worker"]["errors_topic"], *dlqs]
    assert set(errors) <= topics
    own = config_file(
        render(VALUES_BY_ID["plain"], {"config.explain.dlq_topic": "mine", "config.errors.topics": r"a\,b"})
    )
    assert own["explain"]["dlq_topic"] == "mine"  # config.explain wins
    assert own["errors"]["topics"] == "a,b"  # config.errors too


@pytest.mark.parametrize("version", STRIMZI_VERSIONS)
def test_strimzi_resources_take_the_api_version(version: str) -> None:
    objects = render(VALUES_BY_ID["scram-strimzi"], {"strimzi.apiVersion": version})
    strimzi = [o for o in objects if o["apiVersion"].startswith("kafka.strimzi.io/")]
    assert {o["kind"] for o in strimzi} == {"KafkaTopic", "KafkaUser"}
    for obj in strimzi:
        assert obj["apiVersion"] == f"kafka.strimzi.io/{version}"
        jsonschema.validate(obj, _custom_schema(obj))
    default = render(VALUES_BY_ID["scram-strimzi"])
    assert {o["apiVersion"] for o in by_kind(default, "KafkaUser")} == {"kafka.strimzi.io/v1"}


@pytest.mark.parametrize("values", VALUES, ids=ids(VALUES))
def test_the_helm_test_pod_runs_status_on_the_releases_topics(values: Path, tmp_path: Path) -> None:
    objects = render(values)
    (pod,) = by_kind(objects, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    args = container["args"]
    assert args[:3] == ["status", "--wait", "30"]
    topics = args[4::2]
    assert all(flag == "--topic" for flag in args[3::2])
    rendered = {t["spec"]["topicName"] for t in by_kind(objects, "KafkaTopic")}
    doc = config_file(objects)
    assert doc["worker"]["output_topic" if "output_topic" in doc["worker"] else "input_topic"] in topics
    assert set(doc["explain"]["dlq_topic"].split(",")) <= set(topics)
    if rendered:
        assert set(topics) <= rendered
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/etc/olstream/config" in mounts and "/tmp" in mounts
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert not by_kind(render(overlay(tmp_path, values, {"tests": {"enabled": False}})), "Pod")


def test_the_notes_say_what_was_installed_and_how_to_see_lag_and_errors() -> None:
    text = notes(VALUES_BY_ID["scram-strimzi"])
    objects = render(VALUES_BY_ID["scram-strimzi"])
    for workload in workloads(objects):
        assert workload["metadata"]["name"] in text
    assert f"helm test {RELEASE} -n lineage --logs" in text
    (pod,) = by_kind(objects, "Pod")
    topics = " ".join(f"--topic {t}" for t in pod["spec"]["containers"][0]["args"][4::2])
    assert f"exec {RELEASE}-olstream-worker-0 -- olstream status {topics}" in text
    for receiver in ("audit", "marquez"):
        assert (f"exec deploy/{RELEASE}-olstream-sink-{receiver} -- olstream errors list "
                f"--topic openlineage.events.dlq.{receiver}") in text  # fmt: skip
    assert f"exec {RELEASE}-olstream-worker-0 -- olstream errors list --topic olstream.stream.errors" in text
    assert "olstream explain RUN_ID" in text and "kafka.strimzi.io/v1" in text
    assert "<no value>" not in text and "%!" not in text
    plain = notes(VALUES_BY_ID["plain"])
    assert "PLAINTEXT" in plain and "Strimzi" not in plain


VALUES_BY_ID = dict(zip(ids(VALUES), VALUES, strict=True))
