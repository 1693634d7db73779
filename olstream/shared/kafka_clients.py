"""The one builder of Kafka client configuration, used by every client of every service.

librdkafka clients (confluent-kafka producers, consumers, admin clients) take `client_config`
and a role on top of it; faust (aiokafka) takes `faust_broker`. Connection settings that every
client needs (today: the bootstrap servers) are added here, and only here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RELIABLE_PRODUCER: Mapping[str, Any] = {"enable.idempotence": True, "acks": "all"}
"""What every olstream producer asks for: no duplicates from retries, acknowledged by all replicas."""


def client_config(bootstrap: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The settings every librdkafka client shares, then `extra` (librdkafka property names)."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap}
    config.update(extra or {})
    return config


def producer_config(bootstrap: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An idempotent producer (`RELIABLE_PRODUCER`), then `extra`."""
    return client_config(bootstrap, {**RELIABLE_PRODUCER, **(extra or {})})


def consumer_config(bootstrap: str, group: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A consumer of `group` that commits only when told (`enable.auto.commit=false`), then `extra`."""
    return client_config(bootstrap, {"group.id": group, "enable.auto.commit": False, **(extra or {})})


def faust_broker(bootstrap: str) -> str:
    """faust's broker URL for the same servers: `kafka://h1:p1;h2:p2`."""
    return "kafka://" + ";".join(part.strip() for part in bootstrap.split(",") if part.strip())
