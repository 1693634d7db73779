"""What `olstream explain` keeps of each topic it scans: cheap filters first, decoding only what passes.

- Records topic (`RunFinder`): a record's engine run id and a RunStarted's workflow instance are
  Avro strings in its body, so the record can only be of the run when the string's Avro encoding
  (length varint + UTF-8) occurs in the raw value: a substring test in C. Only those are decoded.
  A workflow instance's runs are found by their RunStarted; each one's engine run id becomes a
  further needle for the rest of the partition (a run's records all follow its start, in one
  partition). An OpenLineage run id is not in any record: without its engine run id, every
  RunStarted (known by its fingerprint) is decoded and its run id derived as the worker derives it.
- Events topic and sink DLQ (`EventFinder`): `"runId":"<id>"` in the raw JSON, then the run id
  confirmed from the `olstream.run_id` header or, on a copy without it (DLQ), from the JSON.
- The worker's state changelog (`StateFinder`): the key `{log partition}:{engine run id}`; the last
  value wins (a tombstone: the run was evicted).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from olstream.contract import codec, wire
from olstream.contract.records import Record, RunStarted
from olstream.shared.errors import DecodeError
from olstream.streams.framed_input import InputFraming
from olstream.streams.runid import run_id as derive_run_id

RunKey = tuple[int, str]
"""A run in the event log: (log partition, engine run id); the worker's state key is `p:id`."""


def avro_string(text: str) -> bytes:
    """How Avro encodes `text` in a record body: its length as a zigzag varint, then its UTF-8 bytes."""
    raw = text.encode("utf-8")
    z = len(raw) << 1
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out) + raw


@cache
def _run_started_prefixes() -> frozenset[bytes]:
    """Magic + fingerprint of every RunStarted writer schema (the current one and its history)."""
    return frozenset(
        codec.MAGIC + fp
        for fp, ws in codec.known_writer_schemas().items()
        if ws.record_name.endswith("RunStarted")
    )


def ol_run_id(record: RunStarted) -> str:
    """The run's OpenLineage run id, derived from its RunStarted as the worker derives it."""
    return derive_run_id(
        record.namespace,
        record.workflow_type,
        record.workflow_instance,
        record.engine_run_id,
        record.start_time,
    )


@dataclass(frozen=True, slots=True)
class Found:
    """One message kept by a finder."""

    partition: int
    offset: int
    timestamp_ms: int
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    key: bytes | None = None
    record: Record | None = None  # a records-topic message's decoded record


def found_of(msg: Any, record: Record | None = None, keep_value: bool = True) -> Found:
    _, ts = msg.timestamp()
    headers = tuple((k, v.encode() if isinstance(v, str) else v) for k, v in (msg.headers() or ()))
    return Found(
        msg.partition(),
        msg.offset(),
        max(ts, 0),
        msg.value() if keep_value else None,
        headers,
        msg.key(),
        record,
    )


def header(found: Found, name: str) -> bytes | None:
    for k, v in found.headers:
        if k == name:
            return v
    return None


class RunFinder:
    """One records-topic partition's messages of the wanted runs (see the module docstring).

    `framing`: how a records-topic value is read (either wire format, as its single-object bytes);
    `engine_run_ids`: runs wanted by engine run id; `instance`: runs wanted by workflow instance (the
    latest `max_runs` of the partition kept); `run_ids`: runs wanted by OpenLineage run id (every
    RunStarted decoded, unless `decode_starts` is off: then only those the needles find). Records
    of a run are kept from its RunStarted on, or from anywhere for a run wanted by engine run id.
    """

    def __init__(
        self,
        framing: InputFraming,
        engine_run_ids: frozenset[str] = frozenset(),
        instance: str | None = None,
        run_ids: frozenset[str] = frozenset(),
        max_runs: int = 10,
        decode_starts: bool = True,
    ) -> None:
        self.framing = framing
        self.engine_run_ids = engine_run_ids
        self.decode_starts = decode_starts and bool(run_ids)
        self.instance = instance
        self.run_ids = run_ids
        self.max_runs = max_runs
        self.fixed = [avro_string(e) for e in engine_run_ids] + ([avro_string(instance)] if instance else [])
        self.needles = list(self.fixed)
        self.runs: OrderedDict[RunKey, list[Found]] = OrderedDict()  # runs started here, oldest first
        self.loose: dict[RunKey, list[Found]] = {}  # records of wanted engine ids without their start here
        self.starts_seen = 0  # RunStarteds of the wanted runs (more than `runs` when some were dropped)
        self.dropped: set[RunKey] = set()

    def offer(self, msg: Any) -> None:
        value = msg.value()
        if not value:
            return
        # a confluent-framed record as its single-object bytes (the fingerprint of its schema id)
        value = self.framing.reframed(value, f"records partition {msg.partition()}, offset {msg.offset()}")
        hit = False
        for n in self.needles:
            if n in value:
                hit = True
                break
        if not hit and (not self.decode_starts or value[: codec.HEADER_LEN] not in _run_started_prefixes()):
            return
        try:
            record = codec.decode(value)
        except DecodeError:
            return
        key = (record.partition, record.engine_run_id)
        if isinstance(record, RunStarted) and self._wanted_start(record):
            if key in self.runs or key in self.dropped:
                self.runs.setdefault(key, []).append(found_of(msg, record))  # a repeat of its start
                return
            self.starts_seen += 1
            self.runs[key] = [*self.loose.pop(key, []), found_of(msg, record)]
            needle = avro_string(record.engine_run_id)
            if needle not in self.needles:
                self.needles.append(needle)
            if len(self.runs) > self.max_runs:
                old, _ = self.runs.popitem(last=False)
                self.dropped.add(old)
                self._forget(old)
            return
        if key in self.runs:
            self.runs[key].append(found_of(msg, record))
        elif record.engine_run_id in self.engine_run_ids and key not in self.dropped:
            self.loose.setdefault(key, []).append(found_of(msg, record))

    def _wanted_start(self, r: RunStarted) -> bool:
        return (
            r.engine_run_id in self.engine_run_ids
            or (self.instance is not None and r.workflow_instance == self.instance)
            or (bool(self.run_ids) and ol_run_id(r) in self.run_ids)
        )

    def _forget(self, key: RunKey) -> None:
        needle = avro_string(key[1])
        if needle not in self.fixed and not any(k[1] == key[1] for k in self.runs):
            self.needles.remove(needle)

    def found(self) -> dict[RunKey, list[Found]]:
        """Every run's records (runs whose start is not in this partition included), in offset order."""
        return {**self.loose, **self.runs}


RUN_MARK = b'"run":{"runId":"'
"""What precedes the run id in an event's canonical JSON (`olstream.streams.mapping`): `run` comes
right after `eventType`, before any facet."""


class EventFinder:
    """One events (or DLQ) partition's messages of the wanted OpenLineage run ids, and (`engine_run_ids`)
    of the runs whose workflow facet names a wanted engine run id: `covered` then holds their run ids,
    every event of which is kept (each event carries the facet)."""

    def __init__(self, run_ids: frozenset[str], engine_run_ids: frozenset[str] = frozenset()) -> None:
        self.run_ids = run_ids
        self.engine_run_ids = engine_run_ids
        self.run_id_bytes = frozenset(r.encode("ascii", "replace") for r in run_ids)
        self.engine_needles = [
            b'"engineRunId":' + json.dumps(e, ensure_ascii=False).encode() for e in sorted(engine_run_ids)
        ]
        # JSON in another layout (spaces): the bare strings, confirmed by parsing
        self.needles = sorted(self.run_id_bytes) + [
            json.dumps(e, ensure_ascii=False).encode() for e in engine_run_ids
        ]
        self.kept: list[tuple[str, Found]] = []
        self.covered: set[str] = set(run_ids)

    def offer(self, msg: Any) -> None:
        value = msg.value()
        if not value:
            return
        at = value.find(RUN_MARK)
        if at >= 0:  # the event's own run id comes first (a parent's, in a facet, after it): one look-up
            start = at + len(RUN_MARK)
            if value[start : start + 36] not in self.run_id_bytes and not any(
                n in value for n in self.engine_needles
            ):
                return
        elif not any(n in value for n in self.needles):  # JSON in another layout
            return
        found = found_of(msg)
        rid = header(found, wire.HEADER_RUN_ID)
        run = rid.decode("ascii", "replace") if rid is not None else event_field(value, "run", "runId")
        if run is None:
            return
        if run not in self.run_ids:
            if not self.engine_run_ids or workflow_facet(value).get("engineRunId") not in self.engine_run_ids:
                return
            self.covered.add(run)
        self.kept.append((run, found))

    def merge(self, others: Iterable[EventFinder]) -> EventFinder:
        """This finder with the others' finds added, in partition and offset order."""
        for other in others:
            self.kept.extend(other.kept)
            self.covered |= other.covered
        self.kept.sort(key=lambda item: (item[1].partition, item[1].offset))
        return self

    def only(self, run_ids: Iterable[str]) -> EventFinder:
        """A finder holding the finds of `run_ids` alone."""
        wanted = frozenset(run_ids)
        out = EventFinder(wanted)
        out.kept = [item for item in self.kept if item[0] in wanted]
        return out


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's `Utils.murmur2`, librdkafka's `murmur2_random`), signed 32-bit."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def events_partition(key: bytes, partitions: int) -> int:
    """The events-topic partition of an event key: the worker's producer partitions with murmur2."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def event_field(value: bytes, *path: str) -> str | None:
    """A string field of an event's JSON (None when the JSON or the field is not there)."""
    try:
        doc: Any = json.loads(value)
    except ValueError:
        return None
    for name in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(name)
    return doc if isinstance(doc, str) else None


def workflow_facet(value: bytes) -> dict[str, Any]:
    """The event's olstream workflow run facet (`engineRunId`, `workflowInstance`, ...); {} when absent."""
    try:
        doc = json.loads(value)
        facet = doc["run"]["facets"]["workflow"]
    except (ValueError, KeyError, TypeError):
        return {}
    return facet if isinstance(facet, dict) else {}


class StateFinder:
    """One changelog partition's last write of each wanted state key (None value: a tombstone)."""

    def __init__(self, keys: frozenset[bytes]) -> None:
        self.keys = keys
        self.last: dict[bytes, Found] = {}

    def offer(self, msg: Any) -> None:
        key = msg.key()
        if key in self.keys:
            self.last[key] = found_of(msg)


def state_key_bytes(run: RunKey) -> bytes:
    return f"{run[0]}:{run[1]}".encode()
