"""A real Apache Kafka broker (KRaft), resolved from Maven Central and run locally.

This module runs one node (`start_broker`, `stop_broker`, `broker_status`) and holds the steps
every node goes through (write its config, format its storage, launch it, wait until it answers);
`olstream.devkit.kafka_cluster` runs N of them as one cluster.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from olstream.devkit import process
from olstream.devkit.kafka_config import (
    SASL_SSL,
    TOOL_OPTS,
    KafkaSettings,
    java_command,
    logging_config,
    random_cluster_id,
    render_properties,
    server_properties,
)
from olstream.devkit.kafka_jars import java_and_classpath
from olstream.devkit.kafka_sasl import BrokerSecurity, client_properties, scram_format_args
from olstream.devkit.kafka_tls import (
    CREDENTIALS_FILE,
    ensure_security,
    redact,
    write_client_properties,
    write_private,
)
from olstream.devkit.launcher import Launcher, ServerStatus, runs_java
from olstream.shared.errors import InfrastructureError
from olstream.shared.kafka_clients import client_config

log = logging.getLogger(__name__)
# librdkafka's own connection chatter while polling for readiness is not worth showing.
_admin_log = logging.getLogger(__name__ + ".admin")
_admin_log.setLevel(logging.CRITICAL)

STATE_FILE = "broker.json"
LOG_TAIL_LINES = 40
# Brokers started by this process, kept so they are reaped (and not warned about) when stopped.
_children = process.ChildProcesses()


@dataclass(frozen=True)
class BrokerState:
    """What `up` records in <data-dir>/broker.json about the broker it started."""

    pid: int
    version: str
    host: str
    port: int
    controller_port: int
    data_dir: str
    started_at: float
    node_id: int = 1

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


BrokerStatus = ServerStatus[BrokerState]


is_our_broker = runs_java(_children, "kafka.Kafka", "config/server.properties")
BROKERS = Launcher("broker", STATE_FILE, BrokerState, is_our_broker, _children, log=log)
read_state = BROKERS.read_state
broker_status = BROKERS.status


def _failure(settings: KafkaSettings, reason: str) -> InfrastructureError:
    lines = [f"Kafka {settings.version} did not start: {reason}"]
    for name in ("server.log", "broker.out"):
        text = process.tail(settings.log_dir / name, LOG_TAIL_LINES)
        if text.strip():
            lines += [f"--- last lines of {settings.log_dir / name} ---", text]
    return InfrastructureError("\n".join(lines))


def write_config(settings: KafkaSettings, security: BrokerSecurity | None) -> None:
    """The node's server.properties (0600 when it holds passwords) and logging config."""
    for directory in (settings.config_dir, settings.log_dir, settings.storage_dir):
        directory.mkdir(parents=True, exist_ok=True)
    text = render_properties(server_properties(settings, security))
    if security is not None:
        write_private(settings.server_properties, text)
    else:
        settings.server_properties.write_text(text)
    settings.logging_config.write_text(logging_config(settings))


def is_formatted(settings: KafkaSettings) -> bool:
    return (settings.storage_dir / "meta.properties").exists()


def format_storages(
    nodes: Sequence[KafkaSettings],
    java: str,
    classpath: str,
    cluster_id: str,
    security: BrokerSecurity | None,
) -> None:
    """Format the KRaft storage of every node not formatted yet (in parallel), with one cluster id.

    A `sasl_ssl` cluster gets its SCRAM users here, in its bootstrap metadata.
    """
    scram = scram_format_args(security) if security is not None else []
    running: list[tuple[KafkaSettings, subprocess.Popen[str]]] = []
    for node in nodes:
        if is_formatted(node):
            continue
        cmd = java_command(
            java,
            node,
            classpath,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(node.server_properties),
            "--ignore-formatted",
            *scram,
            jvm_opts=TOOL_OPTS,
        )
        tool = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        running.append((node, tool))
    failures = []
    for node, tool in running:
        output, _ = tool.communicate()
        if tool.returncode != 0:
            tail = "\n".join(redact(output, security).splitlines()[-LOG_TAIL_LINES:])
            failures.append(f"formatting Kafka storage in {node.storage_dir} failed:\n{tail}")
        else:
            log.info("formatted KRaft storage %s (cluster id %s)", node.storage_dir, cluster_id)
    if failures:
        raise InfrastructureError("\n".join(failures))


def node_security(settings: KafkaSettings, formatted: bool) -> BrokerSecurity | None:
    """The cluster's TLS files and passwords (generated the first time); None for plaintext."""
    if settings.security != SASL_SSL:
        return None
    if formatted and not (settings.home / CREDENTIALS_FILE).exists():
        raise InfrastructureError(
            f"the Kafka storage in {settings.home} was formatted without the SASL users of --security "
            "sasl_ssl (a plaintext broker, or its credentials.json is gone): use another --data-dir"
        )
    return ensure_security(settings.home)


def security_config(security: BrokerSecurity | None) -> dict[str, str]:
    """The librdkafka settings a client of the cluster needs (empty for plaintext)."""
    return client_properties(security) if security is not None else {}


def _admin_lists_topics(bootstrap: str, extra: Mapping[str, Any] | None = None, brokers: int = 1) -> bool:
    """An AdminClient of `bootstrap` (with the cluster's security `extra`) sees `brokers` brokers."""
    config = client_config(bootstrap, {"logger": _admin_log, **(extra or {})})
    admin = AdminClient(config)
    try:
        meta = admin.list_topics(timeout=3)
    except Exception:
        return False
    return len(meta.brokers) >= brokers


def wait_ready(
    nodes: Sequence[KafkaSettings], states: Sequence[BrokerState], extra: Mapping[str, Any]
) -> None:
    """Until every node answers an AdminClient that sees all the cluster's brokers."""
    pending = dict(zip((n.node_id for n in nodes), zip(nodes, states, strict=True), strict=True))
    timeout = max(n.start_timeout for n in nodes)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for node_id, (node, state) in list(pending.items()):
            child = _children.get(state.pid)
            code = child.poll() if child is not None else None
            if code is not None:
                raise _failure(node, f"the broker process exited with code {code}")
            if process.port_open(node.host, node.port) and _admin_lists_topics(
                node.bootstrap, extra, node.brokers
            ):
                del pending[node_id]
        if pending:
            time.sleep(0.2)
    if pending:
        node, _ = next(iter(pending.values()))
        seen = f" seeing all {node.brokers} brokers" if node.brokers > 1 else ""
        raise _failure(node, f"no AdminClient answer{seen} at {node.bootstrap} within {timeout:.0f} s")


def launch(settings: KafkaSettings, java: str, classpath: str) -> BrokerState:
    """Start the node's `kafka.Kafka` in its own session and record it in its broker.json."""
    cmd = java_command(java, settings, classpath, "kafka.Kafka", str(settings.server_properties))
    child = _children.start(cmd, settings.log_dir / "broker.out", settings.data_dir)
    state = BrokerState(
        pid=child.pid,
        version=settings.version,
        host=settings.host,
        port=settings.port,
        controller_port=settings.controller_port,
        data_dir=str(settings.data_dir),
        started_at=time.time(),
        node_id=settings.node_id,
    )
    process.write_state_file(settings.data_dir / STATE_FILE, state)
    return state


def abort(states: Sequence[BrokerState]) -> None:
    """Stop nodes this process just launched (a start that failed) and forget their state files."""
    for state in states:
        BROKERS.abandon(state.pid, Path(state.data_dir))


def check_ports_free(nodes: Sequence[KafkaSettings]) -> None:
    for node in nodes:
        for port in (node.port, node.controller_port):
            if not process.port_free(node.host, port):
                raise InfrastructureError(f"port {node.host}:{port} is already in use by another process")


def start_broker(settings: KafkaSettings) -> tuple[BrokerState, bool]:
    """Start the broker of `settings.data_dir` unless it runs; (state, True when this call started it)."""
    if settings.brokers != 1:
        raise ValueError("start_broker runs one node; kafka_cluster.start_cluster runs several")
    with BROKERS.starting(settings.data_dir) as current:
        if current is not None:
            return current, False
        check_ports_free([settings])
        java, classpath = java_and_classpath(settings.version)
        security = node_security(settings, is_formatted(settings))
        write_config(settings, security)
        format_storages([settings], java, classpath, random_cluster_id(), security)
        state = launch(settings, java, classpath)
        try:
            wait_ready([settings], [state], security_config(security))
        except InfrastructureError:
            abort([state])
            raise
        if security is not None:
            write_client_properties(settings.home, security)
        return state, True


def stop_broker(data_dir: Path, timeout: float = 30.0) -> BrokerState | None:
    """Stop exactly the broker recorded in `data_dir` (SIGTERM, SIGKILL after `timeout`)."""
    return BROKERS.stop(data_dir, timeout)
