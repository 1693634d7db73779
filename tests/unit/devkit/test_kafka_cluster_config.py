"""A local cluster's rendered config (N nodes, sasl_ssl), its files and its status (no broker runs)."""

from __future__ import annotations

import json
import logging
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from olstream.cli.kafka import _describe
from olstream.devkit import kafka, kafka_cluster
from olstream.devkit.kafka_config import (
    SASL_SSL,
    KafkaSettings,
    check_layout,
    node_settings,
    render_properties,
    server_properties,
)
from olstream.devkit.kafka_sasl import BrokerSecurity, client_properties, scram_format_args
from olstream.devkit.kafka_tls import load_security, redact, write_client_properties, write_private
from olstream.devkit.settings import KAFKA_UP
from olstream.shared.config import resolve
from olstream.shared.errors import ConfigError, InfrastructureError

ADMIN_PW = "admin-Secret-1"
CLIENT_PW = "client-Secret-2"
STORE_PW = "store-Secret-3"


def cluster(brokers: int = 3, security: str = "plaintext", data_dir: Path = Path("/data/c")) -> KafkaSettings:
    return KafkaSettings(
        version="4.4.0",
        port=19092,
        controller_port=19093,
        data_dir=data_dir,
        brokers=brokers,
        security=security,
    )


def security(tls_dir: Path = Path("/data/c/tls")) -> BrokerSecurity:
    return BrokerSecurity(
        tls_dir, admin_password=ADMIN_PW, client_password=CLIENT_PW, keystore_password=STORE_PW
    )


def test_node_n_listens_on_port_plus_2n_and_lives_in_node_n() -> None:
    nodes = node_settings(cluster(3))
    assert [n.node_id for n in nodes] == [1, 2, 3]
    assert [(n.port, n.controller_port) for n in nodes] == [(19092, 19093), (19094, 19095), (19096, 19097)]
    assert [n.data_dir for n in nodes] == [Path(f"/data/c/node-{i}") for i in (1, 2, 3)]
    assert {n.home for n in nodes} == {Path("/data/c")}
    assert nodes[1].storage_dir == Path("/data/c/node-2/kraft")
    assert cluster(3).cluster_bootstrap == "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"
    assert nodes[2].cluster_bootstrap == cluster(3).cluster_bootstrap  # any node knows the others


def test_one_node_is_the_data_dir_itself() -> None:
    single = cluster(1)
    assert node_settings(single) == (single,)
    assert single.home == single.data_dir
    assert single.cluster_bootstrap == single.bootstrap == "127.0.0.1:19092"


def test_three_nodes_form_a_three_voter_quorum() -> None:
    props = server_properties(node_settings(cluster(3))[1])
    assert props["node.id"] == "2"
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093,2@127.0.0.1:19095,3@127.0.0.1:19097"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19094,CONTROLLER://127.0.0.1:19095"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19094"
    assert props["log.dirs"] == "/data/c/node-2/kraft"


@pytest.mark.parametrize(("brokers", "rf", "min_isr"), [(2, "2", "1"), (3, "3", "2"), (5, "3", "2")])
def test_internal_topics_are_sized_for_the_cluster(brokers: int, rf: str, min_isr: str) -> None:
    props = server_properties(node_settings(cluster(brokers))[0])
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "share.coordinator.state.topic.replication.factor",
        "default.replication.factor",
    ):
        assert props[key] == rf, key
    assert props["transaction.state.log.min.isr"] == min_isr
    assert props["share.coordinator.state.topic.min.isr"] == min_isr
    assert props["min.insync.replicas"] == "1"


def test_one_node_config_is_unchanged_by_the_cluster_options() -> None:
    props = server_properties(cluster(1))
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert props["transaction.state.log.min.isr"] == "1"
    assert not any(k.startswith(("sasl.", "ssl.", "listener.name.")) for k in props)


def test_ports_must_fit_and_must_not_overlap() -> None:
    check_layout(cluster(3))
    with pytest.raises(ValueError, match="overlap"):
        check_layout(replace(cluster(2), controller_port=19094))  # node 2's broker port
    with pytest.raises(ValueError, match="exceed"):
        check_layout(replace(cluster(3), port=65532, controller_port=65533))
    with pytest.raises(ValueError, match="brokers must be"):
        check_layout(cluster(0))
    with pytest.raises(ValueError, match="security must be"):
        check_layout(cluster(1, "ssl"))


def test_sasl_ssl_listener_and_users() -> None:
    node = node_settings(cluster(3, SASL_SSL))[0]
    props = server_properties(node, security())
    assert props["listeners"] == "SASL_SSL://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "SASL_SSL://127.0.0.1:19092"
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
    assert props["inter.broker.listener.name"] == "SASL_SSL"
    assert props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"
    for mechanism in ("scram-sha-256", "scram-sha-512"):
        jaas = props[f"listener.name.sasl_ssl.{mechanism}.sasl.jaas.config"]
        assert jaas == (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="admin" password="{ADMIN_PW}";'
        )
    plain = props["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert plain.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required ")
    assert f'user_admin="{ADMIN_PW}"' in plain and f'user_olstream="{CLIENT_PW}"' in plain
    assert plain.endswith(";")
    assert props["ssl.keystore.location"] == "/data/c/tls/broker.p12"
    assert props["ssl.keystore.type"] == "PKCS12"
    assert props["ssl.keystore.password"] == props["ssl.key.password"] == STORE_PW
    assert props["ssl.truststore.location"] == "/data/c/tls/ca.pem"
    assert props["ssl.truststore.type"] == "PEM"
    assert props["ssl.endpoint.identification.algorithm"] == "https"
    assert "authorizer.class.name" not in props
    assert props["controller.quorum.voters"].count("@") == 3


def test_sasl_ssl_needs_its_security() -> None:
    with pytest.raises(ValueError, match="BrokerSecurity"):
        server_properties(cluster(1, SASL_SSL))


def test_scram_users_are_created_at_format_time_with_both_mechanisms() -> None:
    args = scram_format_args(security())
    assert args[::2] == ["--add-scram"] * 4
    assert args[1::2] == [
        f"SCRAM-SHA-256=[name=admin,password={ADMIN_PW}]",
        f"SCRAM-SHA-512=[name=admin,password={ADMIN_PW}]",
        f"SCRAM-SHA-256=[name=olstream,password={CLIENT_PW}]",
        f"SCRAM-SHA-512=[name=olstream,password={CLIENT_PW}]",
    ]


def test_client_properties_are_librdkafka_settings() -> None:
    assert client_properties(security()) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "olstream",
        "sasl.password": CLIENT_PW,
        "ssl.ca.location": "/data/c/tls/ca.pem",
        "ssl.endpoint.identification.algorithm": "https",
    }


def test_passwords_stay_out_of_reprs_logs_and_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sec = security(tmp_path / "tls")
    assert not any(pw in repr(sec) for pw in (ADMIN_PW, CLIENT_PW, STORE_PW))
    node = node_settings(cluster(3, SASL_SSL, tmp_path))[0]
    assert not any(pw in repr(node) for pw in (ADMIN_PW, CLIENT_PW, STORE_PW))
    caplog.set_level(logging.DEBUG)
    kafka.write_config(node, sec)
    path = write_client_properties(tmp_path, sec)
    assert not any(pw in caplog.text for pw in (ADMIN_PW, CLIENT_PW, STORE_PW))
    assert stat.S_IMODE(node.server_properties.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ADMIN_PW in node.server_properties.read_text()
    assert path.read_text() == render_properties(client_properties(sec), header=False)
    assert path.read_text().splitlines()[0] == "security.protocol=SASL_SSL"
    assert redact(f"tool said {ADMIN_PW} and {CLIENT_PW}", sec) == "tool said *** and ***"


def test_plaintext_config_stays_world_readable(tmp_path: Path) -> None:
    node = cluster(1, data_dir=tmp_path)
    kafka.write_config(node, None)
    assert stat.S_IMODE(node.server_properties.stat().st_mode) == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_private_files_are_0600_even_when_replacing_a_readable_one(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, "new")
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_unreadable_credentials_are_named_without_their_content(tmp_path: Path) -> None:
    (tmp_path / "credentials.json").write_text('{"users": {"admin": "leaky"}}')
    with pytest.raises(InfrastructureError, match="unreadable credentials file") as e:
        load_security(tmp_path)
    assert "leaky" not in str(e.value)
    assert load_security(tmp_path / "nothing") is None


def test_settings_resolve_brokers_and_security() -> None:
    r = resolve(
        "kafka",
        KAFKA_UP,
        {},
        {"OLSTREAM_LOCAL_KAFKA_BROKERS": "3", "OLSTREAM_LOCAL_KAFKA_SECURITY": "sasl_ssl"},
    )
    assert (r["brokers"], r["security"]) == (3, "sasl_ssl")
    r = resolve("kafka", KAFKA_UP, {}, {})
    assert (r["brokers"], r["security"]) == (1, "plaintext")
    with pytest.raises(ConfigError):
        resolve("kafka", KAFKA_UP, {"brokers": "0"}, {})
    with pytest.raises(ConfigError):
        resolve("kafka", KAFKA_UP, {"security": "ssl"}, {})


def _record(data_dir: Path, brokers: int = 3) -> None:
    doc = {
        "version": "4.4.0",
        "host": "127.0.0.1",
        "port": 19092,
        "controller_port": 19093,
        "brokers": brokers,
        "security": "plaintext",
        "cluster_id": "x",
    }
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "cluster.json").write_text(json.dumps(doc))


def test_a_data_dir_keeps_its_cluster_size(tmp_path: Path) -> None:
    _record(tmp_path / "three")
    with pytest.raises(InfrastructureError, match="holds a cluster of 3 nodes"):
        kafka_cluster.start_cluster(cluster(1, data_dir=tmp_path / "three"))
    with pytest.raises(InfrastructureError, match="not 5"):
        kafka_cluster.start_cluster(cluster(5, data_dir=tmp_path / "three"))
    single = tmp_path / "single" / "kraft"
    single.mkdir(parents=True)
    (single / "meta.properties").write_text("")
    with pytest.raises(InfrastructureError, match="single-node broker"):
        kafka_cluster.start_cluster(cluster(3, data_dir=tmp_path / "single"))


def test_status_of_a_cluster_with_a_dead_node(tmp_path: Path) -> None:
    _record(tmp_path)
    dead = {
        "pid": 2**22 + 12345,  # beyond pid_max: never alive
        "version": "4.4.0",
        "host": "127.0.0.1",
        "port": 19094,
        "controller_port": 19095,
        "data_dir": str(tmp_path / "node-2"),
        "started_at": 0.0,
        "node_id": 2,
    }
    (tmp_path / "node-2").mkdir()
    (tmp_path / "node-2" / "broker.json").write_text(json.dumps(dead))
    status = kafka_cluster.cluster_status(tmp_path)
    assert [(n.node_id, n.running, n.address) for n in status.nodes] == [
        (1, False, "127.0.0.1:19092"),
        (2, False, "127.0.0.1:19094"),
        (3, False, "127.0.0.1:19096"),
    ]
    assert status.nodes[1].pid == dead["pid"]
    assert not status.running and not status.any_running
    text = _describe(status)
    assert "running: no" in text and "brokers: 3" in text
    assert f"node 2: pid {dead['pid']}, address 127.0.0.1:19094, running no" in text
    assert "node 1: pid -, address 127.0.0.1:19092, running no" in text
    assert kafka_cluster.stop_cluster(tmp_path) == ()
    assert not (tmp_path / "node-2" / "broker.json").exists()


def test_status_of_a_single_broker_keeps_its_lines(tmp_path: Path) -> None:
    status = kafka_cluster.cluster_status(tmp_path)
    assert _describe(status) == f"running: no\ndata dir: {tmp_path}"
    assert kafka_cluster.client_security(tmp_path) == {}
