"""A local Kafka cluster: N KRaft nodes on loopback, each a combined broker + controller and a voter.

One node is exactly `olstream.devkit.kafka`'s single broker, in the data dir itself. N > 1 nodes
live in `<data-dir>/node-<n>/` (each with its broker.json, config/, logs/ and kraft/), share one
cluster id and the `sasl_ssl` files of the data dir, and are recorded in `<data-dir>/cluster.json`.
Node n listens on `port + 2(n-1)` (clients, and the brokers among themselves) and on
`controller_port + 2(n-1)` (the KRaft quorum, PLAINTEXT), `controller_port` being `port + 1`
unless given.

`start_cluster` is idempotent: it starts the nodes that do not run (all of them the first time,
in parallel, since a quorum needs a majority), leaves the running ones alone, and returns once
every node it started answers an AdminClient that sees all the cluster's brokers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from dataclasses import dataclass, replace
from pathlib import Path

from olstream.devkit import kafka, process
from olstream.devkit.kafka import STATE_FILE, BrokerState
from olstream.devkit.kafka_config import (
    PLAINTEXT,
    SASL_SSL,
    KafkaSettings,
    check_layout,
    node_dir,
    node_settings,
    random_cluster_id,
)
from olstream.devkit.kafka_jars import java_and_classpath
from olstream.devkit.kafka_sasl import client_properties
from olstream.devkit.kafka_tls import CLIENT_PROPERTIES, TLS_DIR, load_security, write_client_properties
from olstream.shared.errors import InfrastructureError

log = logging.getLogger(__name__)

CLUSTER_FILE = "cluster.json"
_CLUSTER_LOCK = ".cluster.lock"


@dataclass(frozen=True)
class ClusterRecord:
    """What `up` records in <data-dir>/cluster.json about a cluster of several nodes."""

    version: str
    host: str
    port: int
    controller_port: int
    brokers: int
    security: str
    cluster_id: str


@dataclass(frozen=True)
class ClusterState:
    """The nodes of a cluster that runs, after `start_cluster`."""

    data_dir: Path
    version: str
    security: str
    nodes: tuple[BrokerState, ...]
    started: tuple[int, ...] = ()
    """The ids of the nodes this call started (empty: every node was running already)."""
    client_properties: Path | None = None
    """`sasl_ssl`: `<data-dir>/client.properties`, the client user's librdkafka settings."""

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def tls_dir(self) -> Path | None:
        """`sasl_ssl`: `<data-dir>/tls` (ca.pem, other-ca.pem, the brokers' certificate)."""
        return self.data_dir / TLS_DIR if self.security == SASL_SSL else None


@dataclass(frozen=True)
class NodeStatus:
    node_id: int
    data_dir: Path
    running: bool
    state: BrokerState | None
    address: str | None

    @property
    def pid(self) -> int | None:
        return self.state.pid if self.state is not None else None


@dataclass(frozen=True)
class ClusterStatus:
    data_dir: Path
    nodes: tuple[NodeStatus, ...]
    version: str | None
    security: str
    client_properties: Path | None

    @property
    def running(self) -> bool:
        """Every node runs."""
        return bool(self.nodes) and all(node.running for node in self.nodes)

    @property
    def any_running(self) -> bool:
        return any(node.running for node in self.nodes)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes if node.address)


def read_record(data_dir: Path) -> ClusterRecord | None:
    return process.read_state_file(data_dir / CLUSTER_FILE, ClusterRecord, "cluster")


def _configured_security(data_dir: Path) -> str:
    """The security mode the node's server.properties was last written with."""
    try:
        text = (data_dir / "config" / "server.properties").read_text()
    except OSError:
        return PLAINTEXT
    return SASL_SSL if "\nlisteners=SASL_SSL://" in text else PLAINTEXT


def _check_data_dir(settings: KafkaSettings, record: ClusterRecord | None) -> None:
    """InfrastructureError when the data dir holds a cluster of another size."""
    where = settings.data_dir
    if settings.brokers == 1:
        if record is not None and record.brokers > 1:
            raise InfrastructureError(
                f"{where} holds a cluster of {record.brokers} nodes: use --brokers {record.brokers} "
                "or another --data-dir"
            )
        return
    if record is None and (kafka.is_formatted(settings) or (where / STATE_FILE).exists()):
        raise InfrastructureError(
            f"{where} holds a single-node broker: use --brokers 1 or another --data-dir"
        )
    if record is not None and record.brokers != settings.brokers:
        raise InfrastructureError(
            f"{where} holds a cluster of {record.brokers} nodes, not {settings.brokers}: use "
            f"--brokers {record.brokers} or another --data-dir"
        )


def _recorded(settings: KafkaSettings, record: ClusterRecord) -> KafkaSettings:
    """The settings the running nodes were started with (they win over the requested ones)."""
    recorded = replace(
        settings,
        version=record.version,
        host=record.host,
        port=record.port,
        controller_port=record.controller_port,
        security=record.security,
    )
    if recorded != settings:
        log.warning(
            "nodes of %s run with version %s, port %d, controller port %d, security %s: "
            "restarting the missing ones with those",
            settings.data_dir,
            record.version,
            record.port,
            record.controller_port,
            record.security,
        )
    return recorded


def _running(nodes: tuple[KafkaSettings, ...]) -> dict[int, BrokerState]:
    found = {}
    for node in nodes:
        state = kafka.read_state(node.data_dir)
        if state is not None and kafka.is_our_broker(state):
            found[node.node_id] = state
    return found


def _state(settings: KafkaSettings, nodes: list[BrokerState], started: list[int]) -> ClusterState:
    security = settings.security if started else _configured_security(Path(nodes[0].data_dir))
    properties = settings.data_dir / CLIENT_PROPERTIES
    return ClusterState(
        data_dir=settings.data_dir,
        version=nodes[0].version,
        security=security,
        nodes=tuple(sorted(nodes, key=lambda n: n.node_id)),
        started=tuple(sorted(started)),
        client_properties=properties if security == SASL_SSL and properties.is_file() else None,
    )


def start_cluster(settings: KafkaSettings) -> ClusterState:
    """Start every node of `settings` that does not run, and wait until they are ready.

    Raises ValueError for impossible settings, InfrastructureError when a node cannot start (the
    nodes this call started are stopped again).
    """
    check_layout(settings)
    if settings.brokers == 1:
        _check_data_dir(settings, read_record(settings.data_dir))
        state, fresh = kafka.start_broker(settings)
        return _state(settings, [state], [1] if fresh else [])
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with process.file_lock(settings.data_dir / _CLUSTER_LOCK), contextlib.ExitStack() as locks:
        record = read_record(settings.data_dir)
        _check_data_dir(settings, record)
        if record is not None and _running(node_settings(settings)):
            settings = _recorded(settings, record)
        nodes = node_settings(settings)
        for node in nodes:
            locks.enter_context(process.file_lock(node.data_dir / ".lock"))
        running = _running(nodes)
        missing = tuple(node for node in nodes if node.node_id not in running)
        if not missing:
            return _state(settings, list(running.values()), [])
        return _start_missing(settings, record, nodes, missing, running)


def _start_missing(
    settings: KafkaSettings,
    record: ClusterRecord | None,
    nodes: tuple[KafkaSettings, ...],
    missing: tuple[KafkaSettings, ...],
    running: dict[int, BrokerState],
) -> ClusterState:
    for node in missing:
        (node.data_dir / STATE_FILE).unlink(missing_ok=True)
    kafka.check_ports_free(missing)
    java, classpath = java_and_classpath(settings.version)
    security = kafka.node_security(settings, any(kafka.is_formatted(node) for node in nodes))
    cluster_id = record.cluster_id if record is not None else random_cluster_id()
    process.write_state_file(
        settings.data_dir / CLUSTER_FILE,
        ClusterRecord(
            version=settings.version,
            host=settings.host,
            port=settings.port,
            controller_port=settings.controller_port,
            brokers=settings.brokers,
            security=settings.security,
            cluster_id=cluster_id,
        ),
    )
    for node in missing:
        kafka.write_config(node, security)
    kafka.format_storages(missing, java, classpath, cluster_id, security)
    launched: list[BrokerState] = []
    ready = False
    try:
        for node in missing:
            launched.append(kafka.launch(node, java, classpath))
        log.info(
            "started Kafka nodes %s of %s", ", ".join(str(n.node_id) for n in missing), settings.data_dir
        )
        kafka.wait_ready(missing, launched, kafka.security_config(security))
        ready = True
    finally:
        if not ready:
            kafka.abort(launched)
    if security is not None:
        write_client_properties(settings.data_dir, security)
    return _state(settings, [*running.values(), *launched], [state.node_id for state in launched])


def _node_dirs(data_dir: Path) -> list[tuple[int, Path]]:
    """(node id, directory) of every node a data dir holds: itself, and/or its node-<n> folders."""
    nodes = sorted(
        (int(path.name.removeprefix("node-")), path)
        for path in data_dir.glob("node-*")
        if path.name.removeprefix("node-").isdigit() and path.is_dir()
    )
    if (data_dir / STATE_FILE).exists() or not nodes:
        state = kafka.read_state(data_dir) if (data_dir / STATE_FILE).exists() else None
        nodes.insert(0, (state.node_id if state is not None else 1, data_dir))
    return nodes


def stop_cluster(data_dir: Path, timeout: float = 30.0) -> tuple[BrokerState, ...]:
    """Stop every node recorded in `data_dir` (a cluster's or a node's): SIGTERM to all of them at
    once, SIGKILL after `timeout`. Returns the states of the nodes that ran."""
    nodes = _node_dirs(data_dir)
    if len(nodes) == 1 and nodes[0][1] == data_dir:
        stopped = kafka.stop_broker(data_dir, timeout=timeout)
        return (stopped,) if stopped is not None else ()
    running = []
    with process.file_lock(data_dir / _CLUSTER_LOCK):
        for _, path in nodes:  # every node shuts down at once, not one after the other
            state = kafka.read_state(path)
            if state is not None and kafka.is_our_broker(state):
                running.append(state)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(state.pid, signal.SIGTERM)
        for _, path in nodes:  # waits for each (SIGKILL after `timeout`), forgets its state file
            kafka.stop_broker(path, timeout=timeout)
    return tuple(running)


def cluster_status(data_dir: Path) -> ClusterStatus:
    """Each node of the data dir: its id, pid, address and whether it runs."""
    record = read_record(data_dir)
    if record is not None:
        dirs = [(n, node_dir(data_dir, n)) for n in range(1, record.brokers + 1)]
    else:
        dirs = _node_dirs(data_dir)
    nodes = []
    for node_id, path in dirs:
        status = kafka.broker_status(path)
        address = status.state.bootstrap if status.state is not None else None
        if address is None and record is not None:
            recorded = KafkaSettings(
                record.version, record.port, record.controller_port, data_dir, record.host
            )
            address = f"{record.host}:{recorded.node_port(node_id)}"
        nodes.append(NodeStatus(node_id, path, status.running, status.state, address))
    versions = [n.state.version for n in nodes if n.state is not None]
    version = versions[0] if versions else (record.version if record is not None else None)
    security = record.security if record is not None else _configured_security(data_dir)
    properties = data_dir / CLIENT_PROPERTIES
    return ClusterStatus(
        data_dir=data_dir,
        nodes=tuple(nodes),
        version=version,
        security=security,
        client_properties=properties if security == SASL_SSL and properties.is_file() else None,
    )


def client_security(data_dir: Path) -> dict[str, str]:
    """The librdkafka settings of the client user of a `sasl_ssl` cluster (what client.properties
    holds: SASL_SSL, SCRAM-SHA-512, user olstream, its password, the CA); {} for plaintext."""
    security = load_security(data_dir)
    return client_properties(security) if security is not None else {}
