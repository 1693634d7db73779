"""A Confluent-compatible Schema Registry: its settings, registering the records topic's schemas, and
resolving the schema ids of `confluent`-framed records to the local schemas' fingerprints.

The client is confluent-kafka's `SchemaRegistryClient` (the extra `schema-registry`:
``confluent-kafka[schemaregistry]``, which brings httpx, authlib, attrs, cachetools and certifi).
Registries that serve Confluent's API: Confluent's own, Apicurio (``/apis/ccompat/v7``), Karapace.

Subjects follow `TopicRecordNameStrategy`: ``<topic>-<record's full name>``, one subject per record
type of a topic (the records topic holds three), each with its own history and compatibility
rule (docs/contract.md#schema-registry).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

from olstream.shared.config import Resolved, Setting, at_least, redact_url
from olstream.shared.errors import ConfigError, InfrastructureError, MissingExtraError
from olstream.shared.logs import register_secret

log = logging.getLogger(__name__)

COMPATIBILITY_LEVELS = (
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "NONE",
)
EXTRA = "schema-registry"

SCHEMA_REGISTRY_SETTINGS = (
    Setting(
        "schema_registry",
        None,
        "URL of a Confluent-compatible Schema Registry (Apicurio: .../apis/ccompat/v7) [none]",
    ),
    Setting(
        "schema_registry_user_info",
        None,
        "the registry's basic auth, as user:password (a secret)",
        secret=True,
    ),
    Setting(
        "schema_registry_bearer_token", None, "the registry's static bearer token (a secret)", secret=True
    ),
    Setting(
        "schema_registry_logical_cluster",
        None,
        "with a bearer token: the registry's logical cluster (Confluent Cloud's lsrc-...) [none]",
    ),
    Setting("schema_registry_ca", None, "CA file that signed the registry's TLS certificate [system CAs]"),
    Setting("schema_registry_certificate", None, "client certificate (PEM) for a registry asking mTLS"),
    Setting("schema_registry_key", None, "private key (PEM) of --schema-registry-certificate"),
    Setting(
        "schema_registry_timeout",
        10.0,
        "seconds a registry request may take",
        parse=float,
        check=at_least(0.1),
    ),
)


@dataclass(frozen=True, slots=True)
class RegistryConnection:
    """Where the registry is and how to authenticate (hashable: one client per connection)."""

    url: str
    user_info: str | None = None
    bearer_token: str | None = None
    logical_cluster: str | None = None
    ca: str | None = None
    certificate: str | None = None
    key: str | None = None
    timeout: float = 10.0

    def client_config(self) -> dict[str, Any]:
        """The `SchemaRegistryClient` configuration."""
        conf: dict[str, Any] = {"url": self.url, "timeout": self.timeout}
        if self.user_info:
            conf["basic.auth.credentials.source"] = "USER_INFO"
            conf["basic.auth.user.info"] = self.user_info
        if self.bearer_token:
            conf["bearer.auth.credentials.source"] = "STATIC_TOKEN"
            conf["bearer.auth.token"] = self.bearer_token
            conf["bearer.auth.logical.cluster"] = self.logical_cluster or ""
        for key, value in (
            ("ssl.ca.location", self.ca),
            ("ssl.certificate.location", self.certificate),
            ("ssl.key.location", self.key),
        ):
            if value:
                conf[key] = value
        return conf

    def __repr__(self) -> str:  # never a secret in a log line
        return f"RegistryConnection({redact_url(self.url)!r})"


def registry_connection_of(r: Resolved) -> RegistryConnection | None:
    """The resolved registry settings as a connection; None without --schema-registry."""
    url = r["schema_registry"]
    if not url:
        for s in SCHEMA_REGISTRY_SETTINGS[1:-1]:
            if r[s.key]:
                raise ConfigError(f"--{s.key.replace('_', '-')} needs --schema-registry URL")
        return None
    if r["schema_registry_user_info"] and r["schema_registry_bearer_token"]:
        raise ConfigError("--schema-registry-user-info and --schema-registry-bearer-token: choose one")
    if r["schema_registry_user_info"] and ":" not in r["schema_registry_user_info"]:
        raise ConfigError("--schema-registry-user-info must be user:password")
    register_secret(r["schema_registry_user_info"])
    register_secret(r["schema_registry_bearer_token"])
    return RegistryConnection(
        url=url.rstrip("/"),
        user_info=r["schema_registry_user_info"],
        bearer_token=r["schema_registry_bearer_token"],
        logical_cluster=r["schema_registry_logical_cluster"],
        ca=r["schema_registry_ca"],
        certificate=r["schema_registry_certificate"],
        key=r["schema_registry_key"],
        timeout=r["schema_registry_timeout"],
    )


@dataclass(frozen=True, slots=True)
class LocalSchema:
    """One writer schema of the project's (`avro/` or `avro/history/`), as the registry gets it."""

    full_name: str  # namespace.name: the record part of its subject
    source: str  # its file, relative to avro/ (named in errors)
    text: str
    fingerprint: bytes  # CRC-64-AVRO, 8 bytes little-endian (what single-object framing carries)


def fingerprint_of_text(text: str) -> bytes:
    """The CRC-64-AVRO fingerprint (8 bytes, little-endian) of a schema's JSON text."""
    parsed = parse_schema(json.loads(text), _write_hint=False)
    return int(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"), 16).to_bytes(8, "little")


def subject_of(topic: str, full_name: str) -> str:
    """`TopicRecordNameStrategy`: the subject of a record type in a topic."""
    return f"{topic}-{full_name}"


class SchemaRegistryUnavailable(InfrastructureError):
    """The registry did not answer (down, unreachable, TLS or auth failed)."""


class UnknownSchemaId(ConfigError):
    """A record's schema id that the registry does not hold: another registry's id."""


class SchemaRefused(ConfigError):
    """The registry refused to register a schema under the subject's compatibility rule."""


def _client_module() -> Any:
    try:
        from confluent_kafka import schema_registry
    except ModuleNotFoundError as e:
        raise MissingExtraError(
            f"--schema-registry needs the Python package {e.name} of the extra `{EXTRA}` "
            f"(confluent-kafka[schemaregistry]), not installed: pip install 'olstream[{EXTRA}]'"
        ) from e
    return schema_registry


class SchemaRegistry:
    """The project's uses of one registry; the client caches what it fetched."""

    def __init__(self, connection: RegistryConnection) -> None:
        module = _client_module()
        self.connection = connection
        self._schema_type = module.Schema
        self._error_type = module.SchemaRegistryError
        try:
            self._client = module.SchemaRegistryClient(connection.client_config())
        except ValueError as e:
            raise ConfigError(f"schema registry settings: {e}") from e
        self._fingerprints: dict[int, bytes] = {}

    def _call(self, what: str, call: Any, *args: Any) -> Any:
        """A registry call; SchemaRegistryUnavailable when it does not answer."""
        try:
            return call(*args)
        except self._error_type:
            raise
        except Exception as e:  # httpx's transport errors, TLS, timeouts: after the client's retries
            raise SchemaRegistryUnavailable(
                f"schema registry {redact_url(self.connection.url)}: {what}: {type(e).__name__}: {e}"
            ) from e

    def register(self, topic: str, schemas: Sequence[LocalSchema], compatibility: str) -> dict[bytes, int]:
        """Set each subject's rule, then register its schemas in order; fingerprint -> schema id.

        Raises SchemaRefused naming the schema, its subject and the rule when the registry refuses one.
        """
        ids: dict[bytes, int] = {}
        ruled: dict[str, bool] = {}  # subject -> its rule is set (False: once it exists)
        for schema in schemas:
            subject = subject_of(topic, schema.full_name)
            if subject not in ruled:
                ruled[subject] = self._set_rule(subject, compatibility)
            elif not ruled[subject]:
                ruled[subject] = self._set_rule(subject, compatibility, new=False)
            try:
                ids[schema.fingerprint] = self._call(
                    "register", self._client.register_schema, subject, self._schema_type(schema.text, "AVRO")
                )
            except self._error_type as e:
                raise SchemaRefused(
                    f"the schema registry refused schema {schema.source} ({schema.full_name}) under subject "
                    f"{subject!r} with compatibility {compatibility}: {e.error_message} (HTTP "
                    f"{e.http_status_code})"
                ) from e
            if not ruled[subject]:  # its first version: nothing before it to be compatible with
                ruled[subject] = self._set_rule(subject, compatibility, new=False)
            self._fingerprints[ids[schema.fingerprint]] = schema.fingerprint
            log.info("schema %s: id %d under subject %s", schema.source, ids[schema.fingerprint], subject)
        return ids

    def _set_rule(self, subject: str, compatibility: str, new: bool = True) -> bool:
        """Set the subject's rule; False when the registry has no such subject yet (Apicurio answers 404
        for a subject without versions: the rule is set after its first one)."""
        try:
            self._call("set compatibility", self._client.set_compatibility, subject, compatibility)
            return True
        except self._error_type as e:
            if new and e.http_status_code == 404:
                return False
            raise ConfigError(
                f"the schema registry refused compatibility {compatibility} for subject {subject!r}: "
                f"{e.error_message} (HTTP {e.http_status_code})"
            ) from e

    def known_ids(self, topic: str, schemas: Iterable[LocalSchema]) -> dict[int, bytes]:
        """The ids the registry gave the local schemas under the topic's subjects (those registered)."""
        for schema in schemas:
            subject = subject_of(topic, schema.full_name)
            try:
                found = self._call(
                    "look up", self._client.lookup_schema, subject, self._schema_type(schema.text, "AVRO")
                )
            except self._error_type as e:
                if e.http_status_code == 404:
                    continue  # not registered (yet): resolved by id when a record names it
                raise SchemaRegistryUnavailable(
                    f"schema registry {redact_url(self.connection.url)}: looking up {schema.source} under "
                    f"{subject!r}: {e.error_message} (HTTP {e.http_status_code})"
                ) from e
            self._fingerprints[found.schema_id] = schema.fingerprint
        return dict(self._fingerprints)

    def fingerprint_of_id(self, schema_id: int) -> bytes:
        """The fingerprint of the schema the registry holds under `schema_id` (fetched once)."""
        known = self._fingerprints.get(schema_id)
        if known is not None:
            return known
        try:
            schema = self._call(f"schema id {schema_id}", self._client.get_schema, schema_id)
        except self._error_type as e:
            if e.http_status_code == 404:
                raise UnknownSchemaId(
                    f"schema registry {redact_url(self.connection.url)} holds no schema id {schema_id}: is "
                    "it the registry the source registered with (or one that keeps its ids)?"
                ) from e
            raise SchemaRegistryUnavailable(
                f"schema registry {redact_url(self.connection.url)}: schema id {schema_id}: "
                f"{e.error_message} (HTTP {e.http_status_code})"
            ) from e
        fp = fingerprint_of_text(schema.schema_str)
        self._fingerprints[schema_id] = fp
        return fp


def schemas_in_order(schemas: Mapping[bytes, tuple[str, str, str]]) -> list[LocalSchema]:
    """(full name, source file, text) by fingerprint -> each record's versions, oldest first.

    `history/<Record>.v<N>.avsc` by N, then the current `<Record>.avsc`: the order they were written,
    so a compatibility rule checks each against the ones before it.
    """

    def order(item: tuple[bytes, tuple[str, str, str]]) -> tuple[str, int]:
        full_name, source, _ = item[1]
        if not source.startswith("history/"):
            return full_name, 1 << 30
        version = source.rsplit(".v", 1)[-1].removesuffix(".avsc")
        return full_name, int(version) if version.isdigit() else 0

    return [LocalSchema(n, s, t, fp) for fp, (n, s, t) in sorted(schemas.items(), key=order)]
