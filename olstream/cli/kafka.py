"""`olstream kafka up|down|status`: a local Kafka broker (or a cluster of N) for development and tests."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from olstream.cli.commands import LauncherCommand, report_stopped
from olstream.devkit import kafka_cluster
from olstream.devkit.kafka import BrokerState
from olstream.devkit.kafka_config import KafkaSettings, default_data_dir
from olstream.devkit.settings import KAFKA_DOWN, KAFKA_STATUS, KAFKA_UP, data_dir_of
from olstream.shared.config import Resolved
from olstream.shared.errors import ExitCode, OlstreamError


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `kafka up`, `kafka down` and `kafka status`."""
    KAFKA.register(
        subparsers,
        "run a local Kafka broker, or a cluster of them (KRaft; jars from Maven Central, Java 17)",
        (
            ("up", "start the broker(s) that do not run yet", KAFKA_UP, _up),
            ("down", "stop the broker(s) started with the same --data-dir", KAFKA_DOWN, _down),
            (
                "status",
                "say whether the broker(s) run, their version and addresses",
                KAFKA_STATUS,
                _status,
            ),
        ),
    )


KAFKA = LauncherCommand("kafka", verbose=("up",), failures=(OlstreamError, ValueError))


def _broker_settings(r: Resolved) -> KafkaSettings:
    return KafkaSettings(
        version=r["version"],
        port=r["port"],
        controller_port=r["controller_port"] or r["port"] + 1,
        data_dir=data_dir_of(r, default_data_dir()),
        start_timeout=r["start_timeout"],
        brokers=r["brokers"],
        security=r["security"],
    )


def _pids(nodes: tuple[BrokerState, ...]) -> str:
    return ", ".join(f"node {n.node_id}: pid {n.pid}" for n in nodes)


def _up(r: Resolved) -> int:
    settings = _broker_settings(r)
    started = time.monotonic()
    cluster = kafka_cluster.start_cluster(settings)
    took = time.monotonic() - started
    if len(cluster.nodes) == 1:
        state = cluster.nodes[0]
        what = f"started in {took:.1f} s" if cluster.started else f"is already running at {state.bootstrap}"
        print(f"Kafka {state.version} {what} (pid {state.pid}, data dir {state.data_dir})", file=sys.stderr)
    elif len(cluster.started) == len(cluster.nodes):
        print(
            f"Kafka {cluster.version}: {len(cluster.nodes)} nodes started in {took:.1f} s "
            f"({_pids(cluster.nodes)}; data dir {cluster.data_dir})",
            file=sys.stderr,
        )
    elif cluster.started:
        restarted = [n for n in cluster.nodes if n.node_id in cluster.started]
        print(
            f"Kafka {cluster.version}: restarted {_pids(tuple(restarted))} in {took:.1f} s; the other "
            f"{len(cluster.nodes) - len(restarted)} nodes were running (data dir {cluster.data_dir})",
            file=sys.stderr,
        )
    else:
        print(
            f"Kafka {cluster.version}: all {len(cluster.nodes)} nodes are already running "
            f"({_pids(cluster.nodes)}; data dir {cluster.data_dir})",
            file=sys.stderr,
        )
    if cluster.client_properties is not None:
        print(
            f"SASL_SSL: the client settings (user olstream, SCRAM-SHA-512, the CA) are in "
            f"{cluster.client_properties}",
            file=sys.stderr,
        )
    print(cluster.bootstrap)
    return ExitCode.OK


def _down(r: Resolved) -> int:
    data_dir = data_dir_of(r, default_data_dir())
    stopped = kafka_cluster.stop_cluster(data_dir, timeout=r["stop_timeout"])
    lines = []
    for state in stopped:
        node = f" node {state.node_id}" if len(stopped) > 1 or state.node_id != 1 else ""
        lines.append(f"stopped Kafka {state.version}{node} at {state.bootstrap} (pid {state.pid})")
    return report_stopped("Kafka broker", data_dir, lines)


def _status(r: Resolved) -> int:
    status = kafka_cluster.cluster_status(data_dir_of(r, default_data_dir()))
    print(_describe(status))
    return ExitCode.OK if status.running else ExitCode.NOT_RUNNING


def _describe(status: kafka_cluster.ClusterStatus) -> str:
    """One broker: the short form (running, version, address, pid). Several: a summary, then a line
    per node."""
    nodes = status.nodes
    lines = []
    if len(nodes) == 1 and nodes[0].data_dir == status.data_dir:
        node = nodes[0]
        if not node.running or node.state is None:
            return f"running: no\ndata dir: {status.data_dir}"
        lines = [
            "running: yes",
            f"version: {node.state.version}",
            f"address: {node.state.bootstrap}",
            f"pid: {node.state.pid}",
        ]
    else:
        up = sum(node.running for node in nodes)
        running = "yes" if status.running else ("no" if not up else f"partly ({up} of {len(nodes)} nodes)")
        lines = [f"running: {running}", f"version: {status.version}", f"brokers: {len(nodes)}"]
        lines.append(f"bootstrap: {status.bootstrap}")
        for node in nodes:
            pid = node.pid if node.pid is not None else "-"
            lines.append(
                f"node {node.node_id}: pid {pid}, address {node.address or '-'}, "
                f"running {'yes' if node.running else 'no'}"
            )
    lines.append(f"security: {status.security}")
    if status.client_properties is not None:
        lines.append(f"client config: {status.client_properties}")
    lines.append(f"data dir: {status.data_dir}")
    return "\n".join(lines)
