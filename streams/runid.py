"""Deterministic OpenLineage run ids in UUID version 7 layout.

The 48-bit big-endian timestamp holds the run's start time in Unix milliseconds,
the remaining 74 free bits hold a SHA-256 of the run's durable identity
(namespace, workflow type, workflow instance, engine run id); the version nibble
is 7 and the variant bits are ``10``. The same records give the same id on any
worker, partition count, region or replay.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from functools import lru_cache

_SEP = b"\x1f"  # unit separator: cannot appear ambiguously because every part is length-prefixed too
_MAX_MS = (1 << 48) - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


def epoch_millis(t: datetime) -> int:
    """Unix milliseconds of an aware datetime, floored (naive datetimes are taken as UTC)."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return (t - _EPOCH) // _MILLISECOND  # exact integer floor division of the timedelta


def identity_digest(namespace: str, workflow_type: str, workflow_instance: str, engine_run_id: str) -> bytes:
    """SHA-256 over the length-prefixed UTF-8 parts of a run's durable identity."""
    h = hashlib.sha256(b"olstream-run-id-v1")
    for part in (namespace, workflow_type, workflow_instance, engine_run_id):
        raw = part.encode("utf-8")
        h.update(len(raw).to_bytes(4, "big"))
        h.update(raw)
        h.update(_SEP)
    return h.digest()


@lru_cache(maxsize=4096)  # a parent's and a root's id are asked again by each of their children
def run_id(
    namespace: str, workflow_type: str, workflow_instance: str, engine_run_id: str, start_time: datetime
) -> str:
    """The run's deterministic UUIDv7 as its canonical lowercase string."""
    ms = epoch_millis(start_time)
    if not 0 <= ms <= _MAX_MS:
        raise ValueError(
            f"start_time {start_time.isoformat()} is outside the UUIDv7 48-bit millisecond range"
        )
    digest = identity_digest(namespace, workflow_type, workflow_instance, engine_run_id)
    raw = bytearray(ms.to_bytes(6, "big") + digest[:10])
    raw[6] = 0x70 | (raw[6] & 0x0F)  # version 7
    raw[8] = 0x80 | (raw[8] & 0x3F)  # RFC 9562 variant 10
    h = raw.hex()  # uuid.UUID's canonical form, without building one
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def timestamp_millis(run_uuid: str) -> int:
    """The 48-bit millisecond timestamp of a UUIDv7 string."""
    return int.from_bytes(uuid.UUID(run_uuid).bytes[:6], "big")
