"""The writer schemas of `avro/` and `avro/history/` as texts, for a schema registry."""

from __future__ import annotations

import json

from olstream.contract.codec import known_writer_schemas, schema_dir


def schema_texts() -> dict[bytes, tuple[str, str, str]]:
    """Fingerprint -> (record's full name, its file under avro/, the file's text) of every writer schema."""
    out: dict[bytes, tuple[str, str, str]] = {}
    folder = schema_dir()
    for fp, ws in known_writer_schemas().items():
        text = (folder / ws.source).read_text(encoding="utf-8")
        raw = json.loads(text)
        namespace = raw.get("namespace")
        out[fp] = (f"{namespace}.{raw['name']}" if namespace else str(raw["name"]), ws.source, text)
    return out
