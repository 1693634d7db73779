"""The worker reads both wire formats of the records topic: a `confluent`-framed value (``00`` + the
registry's schema id) becomes its single-object equivalent (``C3 01`` + the fingerprint of the id's
schema, the same body) where the message is read, so the record step, the run directory and the
events see the bytes the event log stores, whatever the format. A run of the same log in either
format emits the same events, byte for byte.

Ids are resolved before the record step (which must not wait): the ids of the local schemas at
start (`InputFraming.preload`), others once each when first met (a blocking registry request).
An id the registry does not hold, or a registry that does not answer, never makes an error
record: the worker leaves (`ExitCode.SCHEMA_REGISTRY`), and so does a worker without
`--schema-registry` that meets a `confluent`-framed record (`ExitCode.CONFIG`). The worker's
command builds its `InputFraming` at start (`input_framing`) and hands it to what reads the records
topic: faust's codec of the input topic (built with the app) and the run directory's reader.
"""

from __future__ import annotations

import logging
import os
from typing import NoReturn

from olstream.contract.framing import is_confluent, schema_id_of, to_single_object
from olstream.contract.schema_files import schema_texts
from olstream.shared.errors import ConfigError, ExitCode, InfrastructureError
from olstream.shared.schema_registry import RegistryConnection, SchemaRegistry, schemas_in_order

log = logging.getLogger(__name__)


class ConfluentWithoutRegistry(ConfigError):
    """A `confluent`-framed record met by a worker without `--schema-registry`."""


class InputFraming:
    """Turns a records-topic value into its single-object form (unchanged when it already is)."""

    def __init__(self, registry: SchemaRegistry | None) -> None:
        self.registry = registry

    def preload(self, topic: str) -> dict[int, bytes]:
        """The ids of the local schemas under the topic's subjects (a check that the registry answers)."""
        if self.registry is None:
            return {}
        return self.registry.known_ids(topic, schemas_in_order(schema_texts()))

    def single_object(self, value: bytes | None, where: str) -> bytes | None:
        """`value` as single-object bytes; ConfluentWithoutRegistry, UnknownSchemaId or
        SchemaRegistryUnavailable (naming `where`) when a schema id cannot be resolved."""
        if value is None or not is_confluent(value):
            return value
        return self.reframed(value, where)

    def reframed(self, value: bytes, where: str) -> bytes:
        """`single_object` of a value that is not null."""
        if not is_confluent(value):
            return value
        schema_id = schema_id_of(value)
        if self.registry is None:
            raise ConfluentWithoutRegistry(
                f"{where}: a confluent-framed record (schema id {schema_id}) and no --schema-registry to "
                "resolve it: start the worker with the registry the source registered with"
            )
        try:
            fp = self.registry.fingerprint_of_id(schema_id)
        except (ConfigError, InfrastructureError) as e:
            raise type(e)(f"{where}: {e}") from e
        return to_single_object(value, fp)

    def single_object_or_exit(self, value: bytes | None, where: str) -> bytes | None:
        """`single_object`, leaving the process when the record's schema id cannot be resolved."""
        try:
            return self.single_object(value, where)
        except (ConfigError, InfrastructureError) as e:
            exit_unresolved(e)


def input_framing(connection: RegistryConnection | None, topic: str) -> InputFraming:
    """The input framing of a process reading `topic`, with the ids of the local schemas resolved
    (raises when the registry does not answer)."""
    framing = InputFraming(None if connection is None else SchemaRegistry(connection))
    ids = framing.preload(topic)
    if connection is not None:
        log.info("schema registry %s: %d of the local schemas registered for %s", connection, len(ids), topic)
    return framing


def exit_unresolved(error: Exception) -> NoReturn:
    """Leave at once (nothing past the last checkpoint is committed): never an error record."""
    code = ExitCode.CONFIG if isinstance(error, ConfluentWithoutRegistry) else ExitCode.SCHEMA_REGISTRY
    log.critical("%s; exiting with %d (%s), no error record written", error, int(code), code.name)
    logging.shutdown()
    os._exit(code)
