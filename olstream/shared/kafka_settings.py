"""The Kafka settings every service shares: client security, and the replication of its topics.

Security is librdkafka's properties, named as librdkafka (and Kafka's Java clients) name them:

- `--kafka-config FILE` (OLSTREAM_KAFKA_CONFIG): a Java properties file, as Kafka's own tools take
  with `--command-config`. Every property is passed through to every librdkafka client; a Java
  `sasl.jaas.config` of PlainLoginModule or ScramLoginModule becomes `sasl.username` and
  `sasl.password`.
- the dedicated settings below (`--kafka-security-protocol`, `--kafka-sasl-*`, `--kafka-ssl-*`),
  each from its flag, else its variable, else the --config file, win over that file.

faust's aiokafka client takes the subset it understands (`kafka_clients.FAUST_PROPERTIES`).
Secret values are registered with the log redactor, and shown as *** by --print-config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from olstream.shared import java_properties
from olstream.shared.config import Check, Resolved, Setting, at_least
from olstream.shared.errors import ConfigError
from olstream.shared.kafka_clients import (
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    SYSTEM_CAS,
    KafkaConnection,
    is_secret_property,
)
from olstream.shared.logs import register_secret


def _one_of(values: tuple[str, ...]) -> Check:
    """A check that takes any case (the flag's value is upper- or lower-cased first)."""
    return lambda v: None if v is None or v in values else f"must be one of {', '.join(values)}"


KAFKA_CONFIG = Setting(
    "kafka_config",
    None,
    "Java properties file of librdkafka client properties for every Kafka client (like the "
    "--command-config of Kafka's tools); the --kafka-* settings win over it",
)
_PROPERTY_SETTINGS: tuple[tuple[Setting, str], ...] = (
    (
        Setting(
            "kafka_security_protocol",
            None,
            "security.protocol of every Kafka client",
            parse=str.upper,
            check=_one_of(SECURITY_PROTOCOLS),
        ),
        "security.protocol",
    ),
    (
        Setting(
            "kafka_sasl_mechanism", None, "sasl.mechanism", parse=str.upper, check=_one_of(SASL_MECHANISMS)
        ),
        "sasl.mechanism",
    ),
    (Setting("kafka_sasl_username", None, "sasl.username"), "sasl.username"),
    (Setting("kafka_sasl_password", None, "sasl.password (a secret)", secret=True), "sasl.password"),
    (
        Setting("kafka_ssl_ca", None, "ssl.ca.location: PEM file of the CA that signed the brokers"),
        "ssl.ca.location",
    ),
    (
        Setting("kafka_ssl_cert", None, "ssl.certificate.location: PEM client certificate"),
        "ssl.certificate.location",
    ),
    (
        Setting("kafka_ssl_key", None, "ssl.key.location: PEM private key of the client certificate"),
        "ssl.key.location",
    ),
    (Setting("kafka_ssl_key_password", None, "ssl.key.password (a secret)", secret=True), "ssl.key.password"),
    (
        Setting(
            "kafka_ssl_endpoint_identification",
            None,
            "ssl.endpoint.identification.algorithm: https checks the broker's host name [https]",
            parse=str.lower,
            check=_one_of(("https", "none")),
        ),
        "ssl.endpoint.identification.algorithm",
    ),
)
REPLICATION_FACTOR = Setting(
    "replication_factor",
    None,
    "replicas of each topic it creates [min(3, brokers)]",
    parse=int,
    check=at_least(1),
)
MIN_INSYNC_REPLICAS = Setting(
    "min_insync_replicas",
    None,
    "min.insync.replicas of each topic it creates [replication factor - 1, at least 1]",
    parse=int,
    check=at_least(1),
)
KAFKA_CLIENT_SETTINGS = (KAFKA_CONFIG, *(s for s, _ in _PROPERTY_SETTINGS))
"""What every command with a Kafka client declares."""
TOPIC_SETTINGS = (REPLICATION_FACTOR, MIN_INSYNC_REPLICAS)
"""What every command that creates topics declares."""

_JAAS_MODULES = ("PlainLoginModule", "ScramLoginModule")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Replication:
    """The replication of the topics a command creates; None: derived from the cluster's size."""

    factor: int | None = None
    min_insync: int | None = None

    def resolved(self, brokers: int) -> tuple[int, int]:
        """(replication factor, min.insync.replicas) for a cluster of `brokers` brokers.

        A min.insync.replicas above the factor (given alone, on a small cluster) would fail every
        acks=all send: a ConfigError before anything is created.
        """
        factor = self.factor if self.factor is not None else max(1, min(3, brokers))
        min_insync = self.min_insync if self.min_insync is not None else max(1, factor - 1)
        if min_insync > factor:
            raise ConfigError(
                f"min_insync_replicas {min_insync} is above the replication factor {factor} "
                f"(cluster of {brokers} brokers): every acknowledged send would fail; lower it"
            )
        return factor, min_insync


def replication_of(resolved: Resolved) -> Replication:
    replication = Replication(resolved["replication_factor"], resolved["min_insync_replicas"])
    factor, min_insync = replication.factor, replication.min_insync
    if factor is not None and min_insync is not None and min_insync > factor:
        raise ConfigError(
            f"invalid {resolved.command} setting min_insync_replicas {min_insync}: "
            f"above the replication factor {factor}"
        )
    return replication


def read_properties(path: str) -> dict[str, str]:
    """A --kafka-config file, as Java reads it, with a Java `sasl.jaas.config` made librdkafka's."""
    try:
        props = java_properties.read_properties(Path(path), "the Kafka client properties")
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return from_java(props, path)


def from_java(props: Mapping[str, str], origin: str) -> dict[str, str]:
    """librdkafka's properties for what a Java client's file says: `sasl.jaas.config` of a PLAIN or
    SCRAM login module becomes `sasl.username` / `sasl.password`; other keys are kept as they are."""
    out = dict(props)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas is None:
        return out
    if not any(module in jaas for module in _JAAS_MODULES):
        raise ConfigError(
            f"{origin}: sasl.jaas.config names a login module librdkafka cannot use; give "
            "sasl.username and sasl.password (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) instead"
        )
    options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(jaas)}
    for option, prop in (("username", "sasl.username"), ("password", "sasl.password")):
        if option in options:
            out.setdefault(prop, options[option])
    return out


def connection_settings(resolved: Resolved) -> tuple[KafkaConnection, Resolved]:
    """`connection_of`, and the resolved settings with its effective properties (secrets as ***) as
    `kafka_properties`, which --print-config shows."""
    connection = connection_of(resolved)
    origin = f"file {resolved['kafka_config']} and --kafka-*" if resolved["kafka_config"] else "--kafka-*"
    return connection, resolved.with_value("kafka_properties", connection.describe(), origin)


def connection_of(resolved: Resolved) -> KafkaConnection:
    """The command's `KafkaConnection`: the --kafka-config file, overlaid with the --kafka-* settings.

    Checked before anything connects: a SASL protocol needs a user name and a password, and every
    file named must be readable. Secret values are registered with the log redactor.
    """
    path = resolved["kafka_config"]
    props = read_properties(str(path)) if path else {}
    props.pop("bootstrap.servers", None)  # the bootstrap setting names the servers
    for s, prop in _PROPERTY_SETTINGS:
        if resolved[s.key] not in (None, ""):
            props[prop] = str(resolved[s.key])
    for key, value in props.items():
        if is_secret_property(key):
            register_secret(value)
    _check(props, resolved.command)
    return KafkaConnection(resolved["bootstrap"], props)


def _check(props: Mapping[str, str], command: str) -> None:
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(
            f"invalid {command} Kafka property security.protocol {protocol!r}: "
            f"one of {', '.join(SECURITY_PROTOCOLS)}"
        )
    if protocol.startswith("SASL"):
        mechanism = props.get("sasl.mechanism", "").upper()
        if not mechanism:
            raise ConfigError(
                f"{command}: Kafka security.protocol {protocol} needs sasl.mechanism "
                f"({', '.join(SASL_MECHANISMS)}): --kafka-sasl-mechanism or --kafka-config"
            )
        if mechanism in SASL_MECHANISMS:
            missing = [p for p in ("sasl.username", "sasl.password") if not props.get(p)]
            if missing:
                raise ConfigError(
                    f"{command}: Kafka security.protocol {protocol} with {mechanism} needs "
                    f"{' and '.join(missing)} (--kafka-sasl-username, --kafka-sasl-password or "
                    "--kafka-config)"
                )
    for prop in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"):
        location = props.get(prop)
        if location and location != SYSTEM_CAS and not Path(location).exists():
            raise ConfigError(f"{command}: Kafka property {prop} names {location}, which does not exist")
