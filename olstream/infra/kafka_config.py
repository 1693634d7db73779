"""Pure parts of the local Kafka broker: settings, directories and rendered config files."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path

from olstream.infra.process import cache_home, state_home

DEFAULT_KAFKA_VERSION = "4.4.0"
DEFAULT_PORT = 9092
DEFAULT_HOST = "127.0.0.1"
HEAP_OPTS = ("-Xms256m", "-Xmx512m", "-XX:+UseG1GC")


@dataclass(frozen=True)
class KafkaSettings:
    """One local single-node KRaft broker (combined broker + controller)."""

    version: str
    port: int
    controller_port: int
    data_dir: Path
    host: str = DEFAULT_HOST
    start_timeout: float = 90.0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

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
    (OLSTREAM_KAFKA_DATA_DIR, olstream.infra.settings) names another."""
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


def server_properties(settings: KafkaSettings) -> dict[str, str]:
    """The single-node combined-mode config; every internal topic sized for one broker."""
    s = settings
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{s.host}:{s.controller_port}",
        "listeners": f"PLAINTEXT://{s.host}:{s.port},CONTROLLER://{s.host}:{s.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{s.host}:{s.port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(s.storage_dir),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
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
                "share.coordinator.state.topic.replication.factor": "1",
                "share.coordinator.state.topic.min.isr": "1",
                "share.coordinator.state.topic.num.partitions": "1",
            }
        )
    return props


def render_properties(props: dict[str, str]) -> str:
    """Java .properties text (values here never need escaping beyond backslashes)."""
    lines = ["# Written by `olstream kafka up`; rewritten on every start."]
    lines += [f"{key}={value.replace(chr(92), chr(92) * 2)}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def logging_config(settings: KafkaSettings) -> str:
    """log4j2 (Kafka 4.x) or reload4j (Kafka 3.x) config writing a size-capped server.log."""
    log_file = settings.log_dir / "server.log"
    if settings.major >= 4:
        return "\n".join(
            [
                "status = warn",
                "appender.main.type = RollingFile",
                "appender.main.name = MAIN",
                f"appender.main.fileName = {log_file}",
                f"appender.main.filePattern = {log_file}.%i",
                "appender.main.layout.type = PatternLayout",
                "appender.main.layout.pattern = [%d] %p %m (%c)%n",
                "appender.main.policies.type = Policies",
                "appender.main.policies.size.type = SizeBasedTriggeringPolicy",
                "appender.main.policies.size.size = 20MB",
                "appender.main.strategy.type = DefaultRolloverStrategy",
                "appender.main.strategy.max = 3",
                "rootLogger.level = INFO",
                "rootLogger.appenderRef.main.ref = MAIN",
                "logger.state.name = state.change.logger",
                "logger.state.level = WARN",
                "",
            ]
        )
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
