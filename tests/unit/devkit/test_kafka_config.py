"""The local broker's rendered config, logging set-up and directories (pure functions)."""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

import pytest

from olstream.devkit.kafka_config import (
    DEFAULT_KAFKA_VERSION,
    KafkaSettings,
    default_data_dir,
    jar_cache_dir,
    java_command,
    kafka_major,
    logging_config,
    logging_profile,
    random_cluster_id,
    render_properties,
    server_properties,
)
from olstream.devkit.settings import KAFKA_UP, data_dir_of
from olstream.shared.config import resolve
from olstream.shared.java_properties import parse_properties


def settings(version: str = "4.4.0") -> KafkaSettings:
    return KafkaSettings(version=version, port=19092, controller_port=19093, data_dir=Path("/data/k"))


def test_default_version_is_a_4x_release() -> None:
    assert kafka_major(DEFAULT_KAFKA_VERSION) == 4


def test_single_node_kraft_settings() -> None:
    props = server_properties(settings())
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["log.dirs"] == "/data/k/kraft"
    for key in (
        "offsets.topic.replication.factor",
        "offsets.topic.num.partitions",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "transaction.state.log.num.partitions",
        "default.replication.factor",
    ):
        assert props[key] == "1", key
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "false"


def test_share_coordinator_settings_only_on_4x() -> None:
    assert server_properties(settings("4.4.0"))["share.coordinator.state.topic.replication.factor"] == "1"
    assert not any(k.startswith("share.") for k in server_properties(settings("3.9.1")))


def test_logging_binding_per_major_version() -> None:
    assert logging_profile("4.0.0") == "log4j2"
    assert logging_profile("3.9.1") == "reload4j"
    assert settings("4.4.0").logging_config.name == "log4j2.properties"
    assert settings("3.9.1").logging_config.name == "log4j.properties"
    assert "RollingFile" in logging_config(settings("4.4.0"))
    assert "/data/k/logs/server.log" in logging_config(settings("3.9.1"))


def test_java_command_has_small_heap_and_logging_flag() -> None:
    cmd4 = java_command("java", settings("4.4.0"), "/libs/*", "kafka.Kafka", "/x.properties")
    assert cmd4[:3] == ["java", "-Xms256m", "-Xmx512m"]
    assert "-Dlog4j2.configurationFile=/data/k/config/log4j2.properties" in cmd4
    assert cmd4[-2:] == ["kafka.Kafka", "/x.properties"]
    cmd3 = java_command("java", settings("3.9.1"), "/libs/*", "kafka.Kafka")
    assert "-Dlog4j.configuration=file:/data/k/config/log4j.properties" in cmd3


def test_cluster_id_is_kafka_uuid_format() -> None:
    cid = random_cluster_id()
    assert len(cid) == 22
    assert len(base64.urlsafe_b64decode(cid + "==")) == 16
    assert cid != random_cluster_id()


def test_properties_rendering_escapes_backslashes() -> None:
    text = render_properties({"a": "b", "log.dirs": "C:\\x"})
    assert "a=b\n" in text
    assert "log.dirs=C:\\\\x\n" in text


def test_server_properties_are_written_as_java_reads_them() -> None:
    """A data dir with a blank, a non-ASCII letter or a `#` in its path reads back as it is, from
    an ASCII-only file (Kafka reads server.properties as ISO 8859-1)."""
    node = KafkaSettings(
        version="4.4.0", port=19092, controller_port=19093, data_dir=Path("/data/my kafka/é#1")
    )
    props = server_properties(node)
    text = render_properties(props)
    assert text.isascii()
    assert text.splitlines()[0] == "# Written by `olstream kafka up`; rewritten on every start."
    assert parse_properties(text) == props
    assert not render_properties({"a": "1"}, header=False).startswith("#")


def test_directories_follow_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OLSTREAM_LOCAL_KAFKA_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_data_dir() == tmp_path / "state" / "olstream" / "kafka"
    assert jar_cache_dir("4.4.0") == tmp_path / "cache" / "olstream" / "kafka" / "4.4.0" / "libs"
    monkeypatch.setenv("OLSTREAM_LOCAL_KAFKA_DATA_DIR", str(tmp_path / "k"))
    resolved = resolve("kafka", KAFKA_UP, {}, os.environ)  # the variable is a setting of `olstream kafka`
    assert data_dir_of(resolved, default_data_dir()) == tmp_path / "k"


def test_bad_version_is_rejected() -> None:
    with pytest.raises(ValueError, match="not a Kafka version"):
        kafka_major("latest")


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's storage tool would take "-..." for an option; 0xF8 encodes to a leading "-"."""
    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x01" * 16)])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    assert random_cluster_id() == base64.urlsafe_b64encode(b"\x01" * 16).decode().rstrip("=")
