"""The chart's rendered pods run as processes (tests/support/helm_pods.py: the container's program,
environment, mounted ConfigMaps and Secrets, the Dockerfile's ENV and WORKDIR) against a real Kafka
and real HTTP receivers, with a simulated workload in the event log; every event arrives at every
receiver. A wrong flag, variable, port, path or key in the chart fails here: the process exits, its
/healthz never answers at the probe's port, or the events do not arrive.

- plain values: the session's broker;
- scram-strimzi values: a SASL_SSL cluster of its own (as test_secured_pipeline), with the chart's
  KafkaUser names created as SCRAM users (what Strimzi's User Operator does) and the Secrets a
  Strimzi cluster would hold (the user passwords, `<cluster>-cluster-ca-cert`), two receivers each
  with its API key; afterwards the topics the pipeline created are exactly the rendered
  KafkaTopics (partitions, max.message.bytes, cleanup.policy), and every consumer group and
  transactional id the components use falls under their KafkaUser's ACLs. The brokers have no
  authorizer, so the ACLs themselves are not enforced here.
- mtls and metrics values: every pod resolves its settings (`--print-config`, exit 0); the local
  cluster has no mutual-TLS listener, so the mTLS pods are not run against Kafka.
- the `helm test` pod (`olstream status` on the release's topics) passes against the session's
  broker (plain values) and the SASL_SSL cluster (scram-strimzi values, as the worker's KafkaUser),
  and fails with exit KAFKA_REFUSED on a wrong password; in every pod of every values file,
  `olstream status`, `errors list` and `explain` resolve the pod's component's Kafka connection,
  and explain the release's topics.
"""

from __future__ import annotations

import json
import secrets as token
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from olstream.connectors.source.settings import resolve_source_settings
from olstream.shared.errors import ExitCode
from olstream.shared.kafka_settings import read_properties
from olstream.streams.runtime.worker_identity import transactional_id
from tests.support.helm_chart import VALUES, by_kind, config_file, render
from tests.support.helm_pods import (
    PodProcess,
    Secrets,
    free_port,
    hook_pod_processes,
    pod_processes,
    wait_healthy,
)
from tests.support.pipeline_support import GrowingLog, LocalCluster, local_cluster, missing_events
from tests.support.receiver import Receiver
from tests.support.stream_support import tail

pytestmark = pytest.mark.integration

VALUES_BY_ID = {p.name.removesuffix("-values.yaml"): p for p in VALUES}
RUNS = 40
DELIVERY_TIMEOUT = 180.0


def names(uid: str) -> dict[str, str]:
    """Topic and group names of this test only (config keys of the chart's values)."""
    return {
        "config.source.topic": f"{uid}.eventlog",
        "config.worker.input_topic": f"{uid}.eventlog",
        "config.worker.app_id": f"{uid}-worker",
        "config.worker.output_topic": f"{uid}.events",
        "config.worker.errors_topic": f"{uid}.stream-errors",
        "config.sink.topic": f"{uid}.events",
        "config.sink.group": f"{uid}-sink",
        "config.sink.dlq_topic": f"{uid}.dlq",
    }


def ports() -> dict[str, str]:
    return {f"config.{c}.metrics_port": str(free_port()) for c in ("source", "worker", "sink")}


def run_pods(processes: list[PodProcess], receivers: dict[str, Receiver], starts: set[str],
             ends: dict[str, str], topic_ready: Callable[[], bool] | None = None) -> None:  # fmt: skip
    """Start the pods; with `topic_ready`, the sinks once it is true (on Strimzi the KafkaTopics
    exist before any pod starts: a sink creates its DLQ with its topic's partition count, or 1 when
    that topic does not exist yet)."""
    sinks = [p for p in processes if p.container["args"] == ["sink"]]
    try:
        for p in processes:
            if p not in sinks or topic_ready is None:
                p.start()
        if topic_ready is not None:
            deadline = time.monotonic() + 90
            while not topic_ready():
                assert time.monotonic() < deadline, "the workers did not create their output topic"
                time.sleep(0.5)
            for p in sinks:
                p.start()
        wait_healthy(processes, timeout=90)
        deadline = time.monotonic() + DELIVERY_TIMEOUT
        while True:
            missing = {
                name: missing_events([r.body for r in receiver.accepted], starts, ends)
                for name, receiver in receivers.items()
            }
            if not any(missing.values()):
                break
            for p in processes:
                p.check_running()
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not delivered within {DELIVERY_TIMEOUT} s: "
                    + "; ".join(f"{n}: {len(m)} missing, e.g. {m[:2]}" for n, m in missing.items())
                    + "\n" + "\n".join(f"--- {p.pod}\n{tail(p.log, 40)}" for p in processes)
                )  # fmt: skip
            time.sleep(1.0)
    finally:
        codes = {}
        for p in processes:
            if p.proc is not None:
                codes[p.pod] = p.stop()
    assert all(code == 0 for code in codes.values()), f"exit codes after SIGTERM: {codes}\n" + "\n".join(
        f"--- {p.pod}\n{tail(p.log, 30)}" for p in processes
    )


def test_the_plain_values_pods_deliver_every_event(kafka_bootstrap: str, tmp_path: Path) -> None:
    log = GrowingLog(tmp_path / "events.db")
    log.append(RUNS)
    starts, ends = log.expected()
    uid = f"helm-{uuid.uuid4().hex[:8]}"
    with Receiver() as marquez:
        objects = render(VALUES_BY_ID["plain"], {
            **names(uid), **ports(), "kafka.bootstrap": kafka_bootstrap,
            "sink.receivers.marquez.transport.url": marquez.url,
        })  # fmt: skip
        processes = pod_processes(objects, {"eventlog": {"url": log.url}}, tmp_path / "pods")
        assert sorted(p.pod.rsplit("-", 1)[0] for p in processes) == [
            "lineage-olstream-sink-marquez", "lineage-olstream-source",
            "lineage-olstream-worker", "lineage-olstream-worker",
        ]  # fmt: skip
        run_pods(processes, {"marquez": marquez}, starts, ends)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("helm-secured") / "kafka", security="sasl_ssl") as cluster:
        yield cluster


def _admin(cluster: LocalCluster) -> AdminClient:
    """The cluster's own `admin` user (what Strimzi's operators use)."""
    assert cluster.state.client_properties is not None and cluster.state.tls_dir is not None
    props = read_properties(str(cluster.state.client_properties))
    credentials = json.loads((cluster.state.tls_dir.parent / "credentials.json").read_text())
    props.update({"sasl.username": "admin", "sasl.password": credentials["users"]["admin"]})
    return AdminClient({"bootstrap.servers": cluster.bootstrap, **props})


def _create_scram_user(admin: AdminClient, user: str, password: str) -> None:
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    for future in admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, password.encode())]
    ).values():
        future.result(timeout=30)


def _covered(acls: list[dict[str, Any]], kind: str, name: str, operation: str) -> bool:
    for acl in acls:
        resource = acl["resource"]
        if resource["type"] != kind or operation not in acl["operations"]:
            continue
        if resource["patternType"] == "literal" and resource["name"] == name:
            return True
        if resource["patternType"] == "prefix" and name.startswith(resource["name"]):
            return True
    return False


def test_the_scram_strimzi_values_pods_deliver_to_both_receivers(
    secured: LocalCluster, tmp_path: Path
) -> None:
    log = GrowingLog(tmp_path / "events.db")
    log.append(RUNS)
    starts, ends = log.expected()
    uid = f"helm-{uuid.uuid4().hex[:8]}"
    admin = _admin(secured)
    assert secured.state.client_properties is not None
    ca = Path(read_properties(str(secured.state.client_properties))["ssl.ca.location"]).read_text()
    keys = {"marquez": token.token_hex(8), "audit": token.token_hex(8)}
    with Receiver() as marquez, Receiver() as audit:
        receivers = {"marquez": marquez, "audit": audit}
        objects = render(VALUES_BY_ID["scram-strimzi"], {
            **names(uid), **ports(), "kafka.bootstrap": secured.bootstrap,
            **{f"sink.receivers.{n}.transport.url": r.url for n, r in receivers.items()},
        })  # fmt: skip
        users = {u["metadata"]["name"]: u for u in by_kind(objects, "KafkaUser")}
        passwords = {user: token.token_urlsafe(12) for user in users}
        for user, password in passwords.items():
            _create_scram_user(admin, user, password)
        test_secrets: Secrets = {
            "eventlog": {"url": log.url},
            "lineage-kafka-cluster-ca-cert": {"ca.crt": ca},
            "marquez-api-key": {"api-key": keys["marquez"]},
            "audit-api-key": {"api-key": keys["audit"]},
            **{user: {"password": password} for user, password in passwords.items()},
        }
        processes = pod_processes(objects, test_secrets, tmp_path / "pods")
        assert len(processes) == 1 + 2 + 2 + 1  # source, 2 workers, 2 sinks of marquez, 1 of audit
        events = f"{uid}.events"

        def output_exists() -> bool:
            return events in admin.list_topics(timeout=10).topics

        run_pods(processes, receivers, starts, ends, output_exists)
        for name, receiver in receivers.items():
            auth = {r.headers.get("authorization") for r in receiver.accepted}
            assert auth == {f"Bearer {keys[name]}"}, name
    for p in processes:
        text = p.log.read_text(errors="replace")
        for secret in (*passwords.values(), *keys.values()):
            assert secret not in text, p.pod

    # the KafkaTopics are the topics the components created, as they created them
    rendered = {t["spec"]["topicName"]: t["spec"] for t in by_kind(objects, "KafkaTopic")}
    meta = admin.list_topics(timeout=30)
    created = {name: len(t.partitions) for name, t in meta.topics.items() if not name.startswith("__")}
    assert set(created) == set(rendered)
    assert created == {name: spec["partitions"] for name, spec in rendered.items()}
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in rendered]
    for resource, future in admin.describe_configs(resources).items():
        actual = future.result(timeout=30)
        config = rendered[resource.name]["config"]
        assert actual["cleanup.policy"].value == config.get("cleanup.policy", "delete"), resource.name
        assert int(actual["max.message.bytes"].value) == int(config["max.message.bytes"]), resource.name

    # every group and transactional id in use falls under the component's ACLs
    acls = {name.rsplit("-", 1)[1]: u["spec"]["authorization"]["acls"] for name, u in users.items()}
    groups = [g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid]
    assert groups
    for group in groups:
        assert any(_covered(a, "group", group, "Read") for a in acls.values()), group
    source_pod = next(p for p in processes if "-source-" in p.pod)
    settings, _ = resolve_source_settings({}, source_pod.env)
    assert _covered(acls["source"], "transactionalId", settings.transactional_id, "Write")
    doc = config_file(objects)
    tid = transactional_id(doc["worker"]["app_id"], "0123456789abcdef")  # a worker's, whatever its name
    assert _covered(acls["worker"], "transactionalId", tid, "Write"), tid


STUB = {
    "ca.crt": "-",
    "user.crt": "-",
    "user.key": "-",
    "password": "p",
    "api-key": "k",
    "url": "sqlite:///x.db",
}


def _stub_secrets(objects: list[dict[str, Any]]) -> Secrets:
    """Every Secret a rendered pod names (volumes, variables), each with every key a stub."""
    needed: Secrets = {}
    for obj in objects:
        if obj["kind"] not in ("Deployment", "StatefulSet", "Pod"):
            continue
        spec = obj["spec"]["template"]["spec"] if obj["kind"] != "Pod" else obj["spec"]
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                needed[volume["secret"]["secretName"]] = STUB
        for var in spec["containers"][0].get("env", []):
            ref = var.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                needed[ref["name"]] = STUB
    return needed


@pytest.mark.parametrize("values", sorted(VALUES_BY_ID), ids=sorted(VALUES_BY_ID))
def test_every_pod_resolves_its_settings(values: str, tmp_path: Path) -> None:
    """`--print-config` of each rendered container: the file and the variables name only settings
    of valid values; with mTLS the certificate paths are those the Secrets are mounted at."""
    objects = render(VALUES_BY_ID[values], {"kafka.bootstrap": "kafka.example:9093"})
    needed = _stub_secrets(objects)
    for p in pod_processes(objects, needed, tmp_path / "pods"):
        done = subprocess.run([*p.argv, "--print-config"], env=p.env, cwd=p.cwd, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, f"{p.pod}: exit {done.returncode}\n{done.stderr[-2000:]}"
        printed = json.loads(done.stdout)
        assert printed, p.pod


@pytest.mark.parametrize("values", sorted(VALUES_BY_ID), ids=sorted(VALUES_BY_ID))
def test_operations_commands_execd_in_a_pod_connect_as_its_component(values: str, tmp_path: Path) -> None:
    """What `kubectl exec POD -- olstream status|errors list|explain` resolves in each pod (and the
    helm test's): its component's bootstrap, security protocol, SASL user and CA, and for explain
    the release's topics, app id and a receiver's DLQ."""
    objects = render(VALUES_BY_ID[values], {"kafka.bootstrap": "kafka.example:9093"})
    doc = config_file(objects)
    secrets = _stub_secrets(objects)
    pods = pod_processes(objects, secrets, tmp_path / "pods") + hook_pod_processes(
        objects, secrets, tmp_path / "hook"
    )
    assert any(p.workload["kind"] == "Pod" for p in pods)
    for p in pods:
        component = p.container["args"][0]
        section = doc["worker" if component == "status" else component]
        for command in (["status"], ["errors", "list"], ["explain", "some-run"]):
            done = subprocess.run([p.argv[0], *command, "--print-config"], env=p.env, cwd=p.cwd,
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
            assert done.returncode == 0, f"{p.pod} {command}: exit {done.returncode}\n{done.stderr[-2000:]}"
            printed = json.loads(done.stdout)
            assert printed["bootstrap"] == "kafka.example:9093", (p.pod, command)
            for key in ("kafka_security_protocol", "kafka_sasl_mechanism", "kafka_sasl_username"):
                assert printed[key] == section.get(key), (p.pod, command, key)
            if section.get("kafka_ssl_ca"):  # the CA the pod mounts, as a path of this test
                assert printed["kafka_ssl_ca"] in {str(m / "ca.crt") for m in p.mounts.values()}
            if section.get("kafka_sasl_mechanism"):
                assert printed["kafka_sasl_password"] == "***", (p.pod, command)
            if command[0] == "explain":
                for key in ("records_topic", "events_topic", "app_id"):
                    assert printed[key] == doc["explain"][key], (p.pod, key)
                # every receiver's DLQ, `<dlq_topic>.<receiver>`
                assert printed["dlq_topic"] == doc["explain"]["dlq_topic"].split(","), p.pod
                assert all(t.startswith(f"{doc['sink']['dlq_topic']}.") for t in printed["dlq_topic"])
            if command[0] == "errors":  # the release's error topics, its receivers' DLQs among them
                assert printed["topics"] == doc["errors"]["topics"].split(","), p.pod
                assert set(doc["explain"]["dlq_topic"].split(",")) <= set(printed["topics"]), p.pod


def _run_hook(p: PodProcess) -> subprocess.CompletedProcess[str]:
    return subprocess.run(p.argv, env=p.env, cwd=p.cwd, capture_output=True, text=True, timeout=120)


def test_the_helm_test_pod_passes_against_the_plain_broker(kafka_bootstrap: str, tmp_path: Path) -> None:
    uid = f"helm-{uuid.uuid4().hex[:8]}"
    objects = render(VALUES_BY_ID["plain"], {**names(uid), "kafka.bootstrap": kafka_bootstrap})
    (p,) = hook_pod_processes(objects, {}, tmp_path / "pods")
    assert p.argv[1] == "status"
    done = _run_hook(p)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert f"{uid}.events" in done.stdout  # the release's topics, not the defaults


def test_the_helm_test_pod_logs_in_as_the_workers_kafka_user(secured: LocalCluster, tmp_path: Path) -> None:
    uid = f"helm-{uuid.uuid4().hex[:8]}"
    admin = _admin(secured)
    assert secured.state.client_properties is not None
    ca = Path(read_properties(str(secured.state.client_properties))["ssl.ca.location"]).read_text()
    objects = render(VALUES_BY_ID["scram-strimzi"], {**names(uid), "kafka.bootstrap": secured.bootstrap})
    user = "lineage-olstream-worker"
    assert user in {u["metadata"]["name"] for u in by_kind(objects, "KafkaUser")}
    password = token.token_urlsafe(12)
    _create_scram_user(admin, user, password)
    ca_secret = {"lineage-kafka-cluster-ca-cert": {"ca.crt": ca}}
    (p,) = hook_pod_processes(objects, {**ca_secret, user: {"password": password}}, tmp_path / "pods")
    assert p.env["OLSTREAM_KAFKA_SASL_USERNAME"] == user
    done = _run_hook(p)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert f"{uid}.events" in done.stdout
    assert password not in done.stdout + done.stderr
    (wrong,) = hook_pod_processes(objects, {**ca_secret, user: {"password": "wrong"}}, tmp_path / "wrong")
    done = _run_hook(wrong)
    assert done.returncode == ExitCode.KAFKA_REFUSED, f"exit {done.returncode}\n{done.stderr[-2000:]}"
