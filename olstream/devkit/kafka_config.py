"""Pure parts of the local Kafka broker: settings, directories and rendered config files.

One node (the default) keeps its files in the data dir itself. A cluster of N nodes
(`brokers=N`) keeps node n (1..N) in `<data-dir>/node-<n>/`, with broker port `port + 2(n-1)`
and controller port `controller_port + 2(n-1)` (`PORT_STEP`); every node is a combined
broker + controller and a voter of the quorum.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from olstream.devkit.kafka_sasl import BrokerSecurity, security_properties
from olstream.devkit.log4j2 import log4j2_properties
from olstream.devkit.process import cache_home, state_home
from olstream.shared import java_properties

DEFAULT_KAFKA_VERSION = "4.4.0"
DEFAULT_PORT = 9092
DEFAULT_HOST = "127.0.0.1"
HEAP_OPTS = ("-Xms256m", "-Xmx512m", "-XX:+UseG1GC")
PORT_STEP = 2
"""Node n of a cluster listens on `port + PORT_STEP*(n-1)` and `controller_port + PORT_STEP*(n-1)`."""
MAX_BROKERS = 9
PLAINTEXT = "plaintext"
SASL_SSL = "sasl_ssl"
SECURITY_MODES = (PLAINTEXT, SASL_SSL)
HEADER = "Written by `olstream kafka up`; rewritten on every start."
"""The comment atop server.properties."""


@dataclass(frozen=True)
class KafkaSettings:
    """A local KRaft broker (combined broker + controller), or a cluster of `brokers` of them.

    With `brokers > 1` these are the cluster's settings (`port`, `controller_port` and `data_dir`
    are node 1's and the cluster's); `node_settings` gives each node's own, with its `node_id`
    and the cluster's directory as `cluster_dir`.
    """

    version: str
    port: int
    controller_port: int
    data_dir: Path
    host: str = DEFAULT_HOST
    start_timeout: float = 90.0
    brokers: int = 1
    security: str = PLAINTEXT
    node_id: int = 1
    cluster_dir: Path | None = None

    @property
    def bootstrap(self) -> str:
        """This node's address."""
        return f"{self.host}:{self.port}"

    @property
    def home(self) -> Path:
        """The cluster's directory: its TLS files, credentials, client.properties, cluster.json."""
        return self.cluster_dir or self.data_dir

    @property
    def node_ids(self) -> range:
        return range(1, self.brokers + 1)

    def node_port(self, node_id: int) -> int:
        return self.port + PORT_STEP * (node_id - self.node_id)

    def node_controller_port(self, node_id: int) -> int:
        return self.controller_port + PORT_STEP * (node_id - self.node_id)

    @property
    def cluster_bootstrap(self) -> str:
        """Every node's address, comma-separated."""
        return ",".join(f"{self.host}:{self.node_port(n)}" for n in self.node_ids)

    @property
    def listener(self) -> str:
        """The name (and security protocol) of the client and inter-broker listener."""
        return "SASL_SSL" if self.security == SASL_SSL else "PLAINTEXT"

    @property
    def major(self) -> int:
        return kafka_major(self.version)

    @property
    def config_dir(self) -> Path:
        return self.data_dir / "config"

    @property
    def server_properties(self) -> Path:
        return self.config_dir / "server.properties"

    @property
    def logging_config(self) -> Path:
        name = "log4j2.properties" if self.major >= 4 else "log4j.properties"
        return self.config_dir / name

    @property
    def log_dir(self) -> Path:
        """Where the broker's own log files go (server.log, plus stdout/stderr in broker.out)."""
        return self.data_dir / "logs"

    @property
    def storage_dir(self) -> Path:
        """The KRaft metadata and topic data (`log.dirs`)."""
        return self.data_dir / "kraft"


def node_dir(data_dir: Path, node_id: int) -> Path:
    """Node n's directory inside a cluster's data dir."""
    return data_dir / f"node-{node_id}"


def node_settings(settings: KafkaSettings) -> tuple[KafkaSettings, ...]:
    """Every node's own settings: the settings themselves for one node."""
    if settings.brokers == 1:
        return (settings,)
    return tuple(
        replace(
            settings,
            port=settings.node_port(n),
            controller_port=settings.node_controller_port(n),
            data_dir=node_dir(settings.data_dir, n),
            node_id=n,
            cluster_dir=settings.data_dir,
        )
        for n in settings.node_ids
    )


def check_layout(settings: KafkaSettings) -> None:
    """ValueError for a node count, security mode or port scheme that cannot work."""
    if not 1 <= settings.brokers <= MAX_BROKERS:
        raise ValueError(f"brokers must be 1..{MAX_BROKERS}, got {settings.brokers}")
    if settings.security not in SECURITY_MODES:
        raise ValueError(f"security must be one of {', '.join(SECURITY_MODES)}, got {settings.security!r}")
    ports = [p for n in settings.node_ids for p in (settings.node_port(n), settings.node_controller_port(n))]
    if max(ports) > 65535 or min(ports) < 1:
        raise ValueError(
            f"the ports of {settings.brokers} nodes ({min(ports)}..{max(ports)}) exceed 1..65535"
        )
    if len(set(ports)) != len(ports):
        raise ValueError(
            f"broker and controller ports overlap ({', '.join(map(str, ports))}): node n listens on "
            f"port+{PORT_STEP}(n-1) and controller-port+{PORT_STEP}(n-1)"
        )


def kafka_major(version: str) -> int:
    """The major version of a Kafka release string such as "4.4.0"."""
    head = version.split(".", 1)[0]
    if not head.isdigit():
        raise ValueError(f"not a Kafka version: {version!r}")
    return int(head)


def logging_profile(version: str) -> str:
    """The Maven profile of infra/kafka/pom.xml that adds the right logging binding."""
    return "log4j2" if kafka_major(version) >= 4 else "reload4j"


def default_data_dir() -> Path:
    """`$XDG_STATE_HOME/olstream/kafka` (~/.local/state/olstream/kafka); the setting `data_dir`
    (OLSTREAM_LOCAL_KAFKA_DATA_DIR, olstream.devkit.settings) names another."""
    return state_home() / "olstream" / "kafka"


def jar_cache_dir(version: str) -> Path:
    """Per-version jar cache: `$XDG_CACHE_HOME/olstream/kafka/<version>/libs` (~/.cache/...)."""
    return cache_home() / "olstream" / "kafka" / version / "libs"


def random_cluster_id() -> str:
    """A KRaft cluster id in Kafka's format (URL-safe base64 of 16 random bytes, unpadded).

    Like Kafka's own ``Uuid.randomUuid``, never one starting with "-": the storage tool would
    read it as an option (``--cluster-id: expected one argument``, 1 format in 64).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def server_properties(settings: KafkaSettings, security: BrokerSecurity | None = None) -> dict[str, str]:
    """A node's combined-mode config; the internal topics sized for the cluster's node count.

    One node: every replication factor 1. N nodes: factor min(3, N), min ISR one less (at least 1),
    `min.insync.replicas=1` as the broker default. `sasl_ssl` needs the cluster's `security`.
    """
    s = settings
    rf = min(3, s.brokers)
    min_isr = max(1, rf - 1) if s.brokers > 1 else 1
    voters = ",".join(f"{n}@{s.host}:{s.node_controller_port(n)}" for n in s.node_ids)
    name = s.listener
    props = {
        "process.roles": "broker,controller",
        "node.id": str(s.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"{name}://{s.host}:{s.port},CONTROLLER://{s.host}:{s.controller_port}",
        "advertised.listeners": f"{name}://{s.host}:{s.port}",
        "listener.security.protocol.map": f"{name}:{name},CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": name,
        "log.dirs": str(s.storage_dir),
        "num.partitions": "1",
        "default.replication.factor": str(rf),
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": str(rf),
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": str(min_isr),
        "transaction.state.log.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
        "log.retention.hours": "168",
    }
    if s.major >= 4:
        props.update(
            {
                "share.coordinator.state.topic.replication.factor": str(rf),
                "share.coordinator.state.topic.min.isr": str(min_isr),
                "share.coordinator.state.topic.num.partitions": "1",
            }
        )
    if s.security == SASL_SSL:
        if security is None:
            raise ValueError("a sasl_ssl broker needs its BrokerSecurity (certificates and passwords)")
        props.update(security_properties(name, security))
    return props


def render_properties(props: Mapping[str, str], header: bool = True) -> str:
    """Java .properties text of a broker's or client's config, with the "written by" comment
    (`header`) above it; escaped as `java.util.Properties` reads it (ASCII only)."""
    return java_properties.render_properties(props, (HEADER,) if header else ())


def logging_config(settings: KafkaSettings) -> str:
    """log4j2 (Kafka 4.x) or reload4j (Kafka 3.x) config writing a size-capped server.log."""
    log_file = settings.log_dir / "server.log"
    if settings.major >= 4:
        return log4j2_properties(log_file, {"state": ("state.change.logger", "WARN")})
    return "\n".join(
        [
            "log4j.rootLogger=INFO, main",
            "log4j.appender.main=org.apache.log4j.RollingFileAppender",
            f"log4j.appender.main.File={log_file}",
            "log4j.appender.main.MaxFileSize=20MB",
            "log4j.appender.main.MaxBackupIndex=3",
            "log4j.appender.main.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.main.layout.ConversionPattern=[%d] %p %m (%c)%n",
            "log4j.logger.state.change.logger=WARN",
            "",
        ]
    )


TOOL_OPTS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def java_command(
    java: str,
    settings: KafkaSettings,
    classpath: str,
    main: str,
    *args: str,
    jvm_opts: tuple[str, ...] = HEAP_OPTS,
) -> list[str]:
    """The JVM command line for one of Kafka's main classes with this broker's logging config."""
    if settings.major >= 4:
        logging_flag = f"-Dlog4j2.configurationFile={settings.logging_config}"
    else:
        logging_flag = f"-Dlog4j.configuration=file:{settings.logging_config}"
    return [
        java,
        *jvm_opts,
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={settings.log_dir}",
        logging_flag,
        "-cp",
        classpath,
        main,
        *args,
    ]
