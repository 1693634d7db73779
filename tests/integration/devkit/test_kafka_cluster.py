"""`olstream kafka up --brokers N --security sasl_ssl`: real clusters of real brokers on loopback.

a. Three nodes: an RF 3 topic, kill -9 of one node (the cluster goes on serving acks=all), `up`
   again restarts only that node, `down` stops them all.
b. One SASL_SSL node: librdkafka with SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN, a wrong password
   and an untrusted CA refused with their error codes, aiokafka with an ssl context; the
   certificates and passwords survive a restart.
c. Three SASL_SSL nodes together.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import ssl
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiokafka
import pytest
from aiokafka.errors import KafkaConnectionError
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from olstream.devkit import kafka_cluster
from olstream.devkit.kafka_config import DEFAULT_KAFKA_VERSION, KafkaSettings
from olstream.devkit.process import free_port, pid_alive
from olstream.shared.errors import InfrastructureError
from tests.support.pipeline_support import kafka_processes_of

pytestmark = pytest.mark.integration

START_TIMEOUT = 180.0


def run(cmd: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
    )


def free_base(brokers: int) -> int:
    """A port P such that P .. P+2*brokers-1 (every node's two ports) are free now."""
    return free_port(run=2 * brokers)


def settings_for(data_dir: Path, brokers: int = 1, security: str = "plaintext") -> KafkaSettings:
    base = free_base(brokers)
    return KafkaSettings(
        version=os.environ.get("OLSTREAM_KAFKA_VERSION", DEFAULT_KAFKA_VERSION),
        port=base,
        controller_port=base + 1,
        data_dir=data_dir,
        brokers=brokers,
        security=security,
        start_timeout=START_TIMEOUT,
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """The cluster's data dir; whatever runs from it is stopped afterwards."""
    path = tmp_path / "kafka"
    try:
        yield path
    finally:
        kafka_cluster.stop_cluster(path, timeout=20)


def read_properties(path: Path) -> dict[str, str]:
    pairs = (
        line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#")
    )
    return {key: value for key, value in pairs}


def create_topic(bootstrap: str, topic: str, rf: int, extra: dict[str, str], **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **extra})
    futures = admin.create_topics([NewTopic(topic, 3, rf, config=config)], operation_timeout=30)
    futures[topic].result(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # every partition has a leader
        meta = admin.list_topics(topic=topic, timeout=10).topics[topic]
        if (
            meta.error is None
            and len(meta.partitions) == 3
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic} has no leaders")


def produce(bootstrap: str, topic: str, values: list[bytes], extra: dict[str, Any]) -> None:
    errors: list[Any] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 90_000, **extra}
    )
    for value in values:
        producer.produce(topic, value=value, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(120) == 0
    assert errors == [None] * len(values), errors


def consume(bootstrap: str, topic: str, count: int, extra: dict[str, Any]) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            **extra,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value() or b"")
    finally:
        consumer.close()
    return got


def test_three_nodes_survive_a_kill_9_and_up_restarts_only_the_missing_node(
    olstream_cmd: list[str], subprocess_env: dict[str, str], data_dir: Path
) -> None:
    settings = settings_for(data_dir, brokers=3)
    up = [*olstream_cmd, "kafka", "up", "--brokers", "3", "--port", str(settings.port)]
    up += ["--data-dir", str(data_dir), "--start-timeout", str(START_TIMEOUT)]
    started = time.monotonic()
    first = run(up, subprocess_env)
    assert first.returncode == 0, first.stderr
    bootstrap = first.stdout.strip().splitlines()[-1]
    assert bootstrap == settings.cluster_bootstrap
    assert "3 nodes started" in first.stderr
    logging.getLogger(__name__).info("3 nodes up in %.1f s", time.monotonic() - started)

    status = kafka_cluster.cluster_status(data_dir)
    assert status.running and [n.node_id for n in status.nodes] == [1, 2, 3]
    pids = {n.node_id: n.pid for n in status.nodes}
    assert all(pid is not None and pid_alive(pid) for pid in pids.values())

    create_topic(bootstrap, "rf3", 3, {}, **{"min.insync.replicas": "2"})
    produce(bootstrap, "rf3", [b"before-%d" % i for i in range(10)], {})
    assert sorted(consume(bootstrap, "rf3", 10, {})) == sorted(b"before-%d" % i for i in range(10))

    # kill -9 the node leading partition 0: the other two go on (RF 3, min ISR 2, acks=all)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    leader = admin.list_topics(topic="rf3", timeout=10).topics["rf3"].partitions[0].leader
    victim = pids[leader]
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pid_alive(victim) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(victim)
    survivors = ",".join(f"127.0.0.1:{settings.node_port(n)}" for n in (1, 2, 3) if n != leader)
    produce(survivors, "rf3", [b"after-%d" % i for i in range(5)], {})
    down_one = kafka_cluster.cluster_status(data_dir)
    assert [n.running for n in down_one.nodes] == [n != leader for n in (1, 2, 3)]
    assert not down_one.running and down_one.any_running

    # `up` again: only the killed node starts; the running ones keep their pids
    again = kafka_cluster.start_cluster(settings)
    assert again.started == (leader,)
    assert again.bootstrap == bootstrap
    after = kafka_cluster.cluster_status(data_dir)
    assert after.running
    assert {n.node_id: n.pid for n in after.nodes if n.node_id != leader} == {
        n: p for n, p in pids.items() if n != leader
    }
    assert after.nodes[leader - 1].pid != victim
    assert kafka_cluster.start_cluster(settings).started == ()  # idempotent

    shown = run([*olstream_cmd, "kafka", "status", "--data-dir", str(data_dir)], subprocess_env)
    assert shown.returncode == 0, shown.stdout
    assert "running: yes" in shown.stdout and "brokers: 3" in shown.stdout
    assert shown.stdout.count("running yes") == 3
    assert f"bootstrap: {bootstrap}" in shown.stdout

    down = run([*olstream_cmd, "kafka", "down", "--data-dir", str(data_dir)], subprocess_env)
    assert down.returncode == 0, down.stderr
    assert down.stdout.count("stopped Kafka") == 3
    assert kafka_processes_of(data_dir) == []
    gone = run([*olstream_cmd, "kafka", "status", "--data-dir", str(data_dir)], subprocess_env)
    assert gone.returncode == 3 and gone.stdout.count("running no") == 3


def error_codes(bootstrap: str, extra: dict[str, Any], seconds: float = 20) -> list[tuple[int, str]]:
    """The errors librdkafka reports (error_cb) while a producer tries to reach the cluster."""
    seen: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, **extra, "error_cb": seen.append, "log_level": 0})
    producer.produce("nowhere", value=b"x")
    deadline = time.monotonic() + seconds
    while not any(e.code() != KafkaError._ALL_BROKERS_DOWN for e in seen) and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    producer.flush(1)
    return [(e.code(), e.str()) for e in seen if e.code() != KafkaError._ALL_BROKERS_DOWN]


async def aiokafka_send(bootstrap: str, password: str, cafile: str, topic: str) -> None:
    context = ssl.create_default_context(cafile=cafile)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="olstream",
        sasl_plain_password=password,
        ssl_context=context,
        request_timeout_ms=10_000,
    )
    try:
        await producer.start()
        await producer.send_and_wait(topic, b"from aiokafka")
    finally:
        await producer.stop()


def test_sasl_ssl_node_takes_scram_and_plain_and_refuses_bad_credentials_and_other_cas(
    olstream_cmd: list[str],
    subprocess_env: dict[str, str],
    data_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = settings_for(data_dir, security="sasl_ssl")
    up = [*olstream_cmd, "kafka", "up", "--security", "sasl_ssl", "--port", str(settings.port)]
    up += ["--data-dir", str(data_dir), "--start-timeout", str(START_TIMEOUT)]
    first = run(up, subprocess_env)
    assert first.returncode == 0, first.stderr
    bootstrap = first.stdout.strip().splitlines()[-1]
    assert bootstrap == settings.bootstrap
    properties = data_dir / "client.properties"
    assert str(properties) in first.stderr

    # the generated files: private where they hold a secret; no password in the command's output
    credentials = json.loads((data_dir / "credentials.json").read_text())
    secrets = [*credentials["users"].values(), credentials["keystore_password"]]
    assert sorted(credentials["users"]) == ["admin", "olstream"]
    for secret in secrets:
        assert secret not in first.stdout + first.stderr
        for log in (data_dir / "logs").iterdir():
            assert secret not in log.read_text(errors="replace"), log
    private = ["client.properties", "credentials.json", "config/server.properties"]
    private += ["tls/ca.key", "tls/broker.key", "tls/broker.p12"]
    for name in private:
        assert stat.S_IMODE((data_dir / name).stat().st_mode) == 0o600, name
    client = read_properties(properties)
    assert client == kafka_cluster.client_security(data_dir)
    assert client["ssl.ca.location"] == str(data_dir / "tls" / "ca.pem")
    assert client["ssl.endpoint.identification.algorithm"] == "https"
    assert (client["sasl.username"], client["sasl.mechanism"]) == ("olstream", "SCRAM-SHA-512")

    create_topic(bootstrap, "secured", 1, client)
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"):
        produce(bootstrap, "secured", [mechanism.encode()], {**client, "sasl.mechanism": mechanism})
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"):
        got = consume(bootstrap, "secured", 3, {**client, "sasl.mechanism": mechanism})
        assert sorted(got) == [b"PLAIN", b"SCRAM-SHA-256", b"SCRAM-SHA-512"], mechanism

    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        refused = error_codes(bootstrap, {**client, "sasl.mechanism": mechanism, "sasl.password": "wrong"})
        assert refused and {code for code, _ in refused} == {KafkaError._AUTHENTICATION}, refused
        assert "Authentication failed" in refused[0][1]
    untrusted = error_codes(bootstrap, {**client, "ssl.ca.location": str(data_dir / "tls" / "other-ca.pem")})
    assert untrusted and {code for code, _ in untrusted} == {KafkaError._SSL}, untrusted
    assert "certificate verify failed" in untrusted[0][1]

    cafile = client["ssl.ca.location"]
    asyncio.run(aiokafka_send(bootstrap, client["sasl.password"], cafile, "secured"))
    caplog.set_level(logging.ERROR, logger="aiokafka")
    with pytest.raises(KafkaConnectionError):
        asyncio.run(aiokafka_send(bootstrap, "wrong", cafile, "secured"))
    assert "SaslAuthenticationFailed" in caplog.text
    caplog.clear()
    with pytest.raises(KafkaConnectionError):
        asyncio.run(
            aiokafka_send(bootstrap, client["sasl.password"], str(data_dir / "tls/other-ca.pem"), "x")
        )
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text

    # a restart keeps the CA, the certificates and the passwords
    ca = (data_dir / "tls" / "ca.pem").read_bytes()
    assert run([*olstream_cmd, "kafka", "down", "--data-dir", str(data_dir)], subprocess_env).returncode == 0
    second = run(up, subprocess_env)
    assert second.returncode == 0, second.stderr
    assert (data_dir / "tls" / "ca.pem").read_bytes() == ca
    assert json.loads((data_dir / "credentials.json").read_text()) == credentials
    assert read_properties(properties) == client
    produce(bootstrap, "secured", [b"after restart"], client)


def test_three_sasl_ssl_nodes(data_dir: Path) -> None:
    for attempt in range(3):
        settings = settings_for(data_dir, brokers=3, security="sasl_ssl")
        try:
            state = kafka_cluster.start_cluster(settings)
            break
        except InfrastructureError as e:
            if "already in use" not in str(e) or attempt == 2:
                raise
    assert state.started == (1, 2, 3) and state.security == "sasl_ssl"
    assert state.client_properties == data_dir / "client.properties"
    assert state.tls_dir == data_dir / "tls"
    client = kafka_cluster.client_security(data_dir)
    assert read_properties(state.client_properties) == client
    for node in state.nodes:
        config = Path(node.data_dir) / "config" / "server.properties"
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        assert f"ssl.truststore.location={data_dir / 'tls' / 'ca.pem'}" in config.read_text()
    create_topic(state.bootstrap, "rf3", 3, client, **{"min.insync.replicas": "2"})
    produce(state.bootstrap, "rf3", [b"a", b"b", b"c"], client)
    assert sorted(consume(state.bootstrap, "rf3", 3, client)) == [b"a", b"b", b"c"]
    status = kafka_cluster.cluster_status(data_dir)
    assert status.running and status.security == "sasl_ssl"
    assert len(kafka_cluster.stop_cluster(data_dir)) == 3
    assert kafka_processes_of(data_dir) == []
