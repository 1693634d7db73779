"""The source's side of the `confluent` wire format: registering the schemas, re-framing each row.

With `--schema-registry` the source registers every writer schema (`avro/history` oldest first, then
the current one) under the records topic's subjects (`TopicRecordNameStrategy`) with the subject's
compatibility rule, and refuses to start when the registry refuses one. With `--wire-format
confluent` each good row's ``C3 01`` + fingerprint header becomes ``00`` + its schema id (the body
unchanged), and a position marker becomes a null value, which registry readers pass over.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from olstream.contract.framing import CONFLUENT, fingerprint_of_value, to_confluent
from olstream.contract.schema_files import schema_texts
from olstream.eventlog.store import StoredRow
from olstream.shared.errors import ConfigError
from olstream.shared.schema_registry import SchemaRegistry, schemas_in_order

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RowFraming:
    """Fingerprint -> the registry's schema id, for every writer schema the source knows."""

    ids: dict[bytes, int]

    def row(self, row: StoredRow) -> StoredRow:
        """The row with its value in Confluent framing (a row whose header the check passed)."""
        fp = fingerprint_of_value(row.payload)
        schema_id = None if fp is None else self.ids.get(fp)
        if schema_id is None:
            raise ConfigError(
                f"log partition {row.partition}, offset {row.offset}: writer schema "
                f"{fp.hex() if fp else '?'} has no id in the schema registry"
            )
        return StoredRow(row.partition, row.offset, to_confluent(row.payload, schema_id))


def register_schemas(
    registry: SchemaRegistry, topic: str, compatibility: str, wire_format: str
) -> RowFraming | None:
    """Register the schemas (SchemaRefused naming the one refused); the re-framing for `confluent`."""
    schemas = schemas_in_order(schema_texts())
    ids = registry.register(topic, schemas, compatibility)
    log.info(
        "registered %d schemas of %s in %s (compatibility %s); wire format %s",
        len(ids),
        topic,
        registry.connection,
        compatibility,
        wire_format,
    )
    return RowFraming(ids) if wire_format == CONFLUENT else None
