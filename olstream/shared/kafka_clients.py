"""The one builder of Kafka client configuration, used by every client of every service.

A `KafkaConnection` is where and how to reach the cluster: the bootstrap servers, plus the
librdkafka properties of its security (TLS, SASL) and whatever else the operator passed through
(`--kafka-config FILE`, `olstream.shared.kafka_settings`). librdkafka clients (confluent-kafka
producers, consumers, admin clients) take `client_config` and a role on top of it; faust
(aiokafka) takes `faust_broker` and `faust_credentials`, built from the same properties.

Every librdkafka client logs through `LIBRDKAFKA_LOG` (confluent-kafka's `logger` property), so its
lines are the command's own log lines, at the command's log level, never librdkafka's raw
`%6|...|FAC|rdkafka#producer-1| ...` lines on stderr. With a logger, confluent-kafka queues the lines
(`log.queue`) and a client's `poll()`, `consume()` or `flush()` logs them; the lines a client logs
while it is destroyed (librdkafka's `BGQUEUE` "Purging N unserved events", for one) are dropped.
While a broker is away, the handler of `olstream.shared.logs.setup_logging` folds these lines (and
aiokafka's) into one WARNING per lost connection and one INFO when it is back
(`olstream.shared.connection_logs`); the lines it does not recognise keep librdkafka's severity.

Every function accepts a plain bootstrap string too (no security: PLAINTEXT), which is what the
tests and the local tools use.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olstream.shared.errors import ConfigError
from olstream.shared.logs import REDACTED

LIBRDKAFKA_LOG = logging.getLogger("librdkafka")
"""The logger of every librdkafka client's lines (`client_config`); `extra` may name a quieter one."""

RELIABLE_PRODUCER: Mapping[str, Any] = {"enable.idempotence": True, "acks": "all"}
"""What every olstream producer asks for: no duplicates from retries, acknowledged by all replicas."""

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SYSTEM_CAS = "probe"  # librdkafka's ssl.ca.location for the system's CA certificates
SECRET_WORDS = ("password", "secret", "jaas", "token", "credential", "key.pem", "oauthbearer.config")
"""A property whose name holds one of these is a secret: never logged, printed or put in an error."""

# The librdkafka properties aiokafka (faust) understands too; the rest apply to librdkafka only.
FAUST_PROPERTIES = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
    }
)


def is_secret_property(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


@dataclass(frozen=True)
class KafkaConnection:
    """The bootstrap servers and the librdkafka properties every client of this cluster needs."""

    bootstrap: str
    properties: Mapping[str, str] = field(default_factory=dict, repr=False)  # secrets: `describe`

    def __repr__(self) -> str:
        return f"KafkaConnection({self.bootstrap!r}, {self.describe()!r})"

    @property
    def security_protocol(self) -> str:
        return self.properties.get("security.protocol", "PLAINTEXT").upper()

    def describe(self) -> dict[str, str]:
        """The properties with every secret as ***, for logs and --print-config."""
        return {k: (REDACTED if is_secret_property(k) else v) for k, v in sorted(self.properties.items())}

    def summary(self) -> str:
        """`host:9093 (SASL_SSL, SCRAM-SHA-512 as olstream)`, or the servers alone for PLAINTEXT: for log
        lines and errors, no secret."""
        p = self.properties
        if self.security_protocol == "PLAINTEXT":
            return self.bootstrap
        parts = [self.security_protocol]
        if "SASL" in self.security_protocol:
            parts.append(f"{p.get('sasl.mechanism', 'GSSAPI')} as {p.get('sasl.username', '?')}")
        return f"{self.bootstrap} ({', '.join(parts)})"


Kafka = KafkaConnection | str
"""A connection, or a bootstrap string (PLAINTEXT)."""


def as_connection(kafka: Kafka) -> KafkaConnection:
    return kafka if isinstance(kafka, KafkaConnection) else KafkaConnection(kafka)


def bootstrap_of(kafka: Kafka) -> str:
    return as_connection(kafka).bootstrap


def client_config(kafka: Kafka, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The settings every librdkafka client shares (servers, security, `LIBRDKAFKA_LOG`), then `extra`."""
    connection = as_connection(kafka)
    config: dict[str, Any] = {
        "bootstrap.servers": connection.bootstrap,
        **connection.properties,
        "logger": LIBRDKAFKA_LOG,
    }
    config.update(extra or {})
    return config


def producer_config(kafka: Kafka, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An idempotent producer (`RELIABLE_PRODUCER`), then `extra`."""
    return client_config(kafka, {**RELIABLE_PRODUCER, **(extra or {})})


def consumer_config(kafka: Kafka, group: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A consumer of `group` that commits only when told (`enable.auto.commit=false`), then `extra`."""
    return client_config(kafka, {"group.id": group, "enable.auto.commit": False, **(extra or {})})


def faust_broker(kafka: Kafka) -> str:
    """faust's broker URL for the same servers: `kafka://h1:p1;h2:p2`."""
    servers = bootstrap_of(kafka)
    return "kafka://" + ";".join(part.strip() for part in servers.split(",") if part.strip())


def ssl_context(properties: Mapping[str, str]) -> ssl.SSLContext:
    """A Python TLS context from librdkafka's ssl.* properties (the CA, client certificate and key).

    Hostname verification is on unless `ssl.endpoint.identification.algorithm` is `none`, as in
    librdkafka (whose default is `https` since 2.0). librdkafka's `ssl.ca.location=probe` (the
    system's CA certificates) is Python's default trust store.
    """
    ca = properties.get("ssl.ca.location")
    if ca == SYSTEM_CAS:
        ca = None
    try:
        if ca and Path(ca).is_dir():
            context = ssl.create_default_context(capath=ca)
        else:
            context = ssl.create_default_context(cafile=ca or None)
        cert = properties.get("ssl.certificate.location")
        if cert:
            context.load_cert_chain(
                cert, properties.get("ssl.key.location") or None, properties.get("ssl.key.password") or None
            )
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(
            f"cannot load the Kafka TLS files (ssl.ca.location, ssl.certificate.location): {e}"
        ) from e
    algorithm = properties.get("ssl.endpoint.identification.algorithm", "https").lower()
    context.check_hostname = algorithm != "none"
    return context


def faust_credentials(kafka: Kafka) -> Any:
    """faust's `broker_credentials` for the connection's security; None for PLAINTEXT."""
    from faust.auth import SASLCredentials, SSLCredentials
    from faust.types.auth import SASLMechanism

    connection = as_connection(kafka)
    p = connection.properties
    protocol = connection.security_protocol
    if protocol == "PLAINTEXT":
        return None
    context = ssl_context(p) if protocol in ("SSL", "SASL_SSL") else None
    if protocol == "SSL":
        return SSLCredentials(context)
    mechanism = p.get("sasl.mechanism", "PLAIN").upper()
    if mechanism not in SASL_MECHANISMS:
        raise ConfigError(
            f"the worker's faust client supports sasl.mechanism {', '.join(SASL_MECHANISMS)}, not {mechanism}"
        )
    return SASLCredentials(
        username=p.get("sasl.username"),
        password=p.get("sasl.password"),
        ssl_context=context,
        mechanism=SASLMechanism(mechanism),
    )


def librdkafka_only(kafka: Kafka) -> list[str]:
    """The passed-through properties faust's aiokafka client cannot take (they serve librdkafka only)."""
    return sorted(k for k in as_connection(kafka).properties if k not in FAUST_PROPERTIES)
