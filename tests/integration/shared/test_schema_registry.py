"""The records topic with a real Schema Registry (a local Apicurio, `schema_registry`): the source
registers every schema and is refused an incompatible one; in `confluent` format every message of the
topic reads with confluent-kafka's own AvroDeserializer and the registry's URL alone; the worker's
events are byte-identical to a `single-object` run of the same log; an id it cannot resolve stops it
without an error record."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import DeserializingConsumer, KafkaError, TopicPartition
from confluent_kafka.error import ConsumeError
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import StringDeserializer

from olstream.contract import codec, framing
from olstream.contract.schema_files import schema_texts
from olstream.shared.errors import ExitCode
from olstream.shared.schema_registry import fingerprint_of_text, schemas_in_order, subject_of
from tests.support.openlineage_schema import validator
from tests.support.source_support import (
    append_raw,
    message_count,
    read_rows,
    read_topic,
    run_source,
    write_log,
)
from tests.support.stream_support import (
    OLSTREAM,
    consume_all,
    env,
    produce_raw,
    start_worker,
    tail,
    worker_cmd,
)
from tests.unit.contract.test_codec import RECORDS

pytestmark = pytest.mark.integration

REJECTED = [(0, b"\xc3\x01not avro at all"), (1, b"plain garbage"), (2, b"\xc3\x01" + b"\x00" * 8)]


def source(log_url: str, topic: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_source(OLSTREAM, env(), log_url, topic, "--partitions", "3", *extra)


def registry_flags(url: str, wire_format: str = "confluent") -> tuple[str, ...]:
    return ("--schema-registry", url, "--wire-format", wire_format)


def test_every_schema_is_registered_in_order_and_an_incompatible_one_refused(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    log_url = f"sqlite:///{tmp_path / 'log.db'}"
    write_log(log_url, 200, partitions=3)
    topic = f"sr-reg-{uuid.uuid4().hex[:8]}"
    done = source(log_url, topic, "--schema-registry", schema_registry)
    assert done.returncode == 0, done.stderr[-3000:]
    client = SchemaRegistryClient({"url": schema_registry})
    for schema in schemas_in_order(schema_texts()):
        subject = subject_of(topic, schema.full_name)
        assert client.get_compatibility(subject) == "BACKWARD"
        assert client.lookup_schema(subject, Schema(schema.text, "AVRO")).schema_id > 0
    versions = client.get_versions(subject_of(topic, "io.olstream.eventlog.RunStarted"))
    texts = [client.get_version(subject_of(topic, "io.olstream.eventlog.RunStarted"), v).schema.schema_str
             for v in versions]  # fmt: skip
    expected = [
        s.fingerprint for s in schemas_in_order(schema_texts()) if s.full_name.endswith(".RunStarted")
    ]
    assert len(expected) == 3
    assert [fingerprint_of_text(t) for t in texts] == expected, "v1, v2, then the current one"

    # another topic whose RunEnded subject already holds a version without `status`: the current
    # schema adds a field without a default, which BACKWARD refuses
    other = f"sr-refused-{uuid.uuid4().hex[:8]}"
    ended = json.loads(dict((s.full_name, s.text) for s in schemas_in_order(schema_texts()))[
        "io.olstream.eventlog.RunEnded"])  # fmt: skip
    ended["fields"] = [f for f in ended["fields"] if f["name"] != "status"]
    client.register_schema(
        subject_of(other, "io.olstream.eventlog.RunEnded"), Schema(json.dumps(ended), "AVRO")
    )
    refused = source(log_url, other, "--schema-registry", schema_registry)
    assert refused.returncode == ExitCode.CONFIG, refused.stderr[-3000:]
    assert "RunEnded.avsc" in refused.stderr and "compatibility BACKWARD" in refused.stderr, refused.stderr
    assert message_count(kafka_bootstrap, other) == 0, "nothing published before the refusal"
    # the rule is a setting: NONE accepts the same change
    accepted = source(log_url, other, "--schema-registry", schema_registry, "--schema-compatibility", "NONE")
    assert accepted.returncode == 0, accepted.stderr[-3000:]


def read_with_avro_deserializer(
    bootstrap: str, registry_url: str, topic: str
) -> list[tuple[dict | None, dict]]:
    """Every message, as another team would read it: (value as AvroDeserializer gives it, headers)."""
    consumer = DeserializingConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"other-team-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "key.deserializer": StringDeserializer("utf_8"),
            "value.deserializer": AvroDeserializer(SchemaRegistryClient({"url": registry_url})),
        }
    )
    try:
        parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[tuple[dict | None, dict]] = []
        eof: set[int] = set()
        while len(eof) < len(parts):
            try:  # DeserializingConsumer raises a partition's end as an error
                msg = consumer.poll(5.0)
            except ConsumeError as e:
                assert e.code == KafkaError._PARTITION_EOF, e
                assert e.kafka_message is not None
                eof.add(e.kafka_message.partition())
                continue
            assert msg is not None, "the topic's end never came"
            out.append((msg.value(), {k: v.decode() for k, v in msg.headers() or []}))
        return out
    finally:
        consumer.close()


def explain(
    bootstrap: str, run: str, records: str, events: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    args = ("--records-topic", records, "--events-topic", events, "--json", "--bootstrap", bootstrap)
    cmd = [*OLSTREAM, "explain", run, *args, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env(), check=False)


def run_worker(bootstrap: str, tmp_path: Path, name: str, topic: str, *extra: str) -> tuple[str, str, str]:
    """(events topic, errors topic, app id) of a worker run on `topic` until idle."""
    out, err, app_id = f"{topic}.events", f"{topic}.stream-errors", f"app-{name}-{uuid.uuid4().hex[:6]}"
    log = tmp_path / f"{name}.log"
    proc = start_worker(
        [*worker_cmd(bootstrap, app_id, tmp_path / name, topic, out, err, *extra), "--until-idle"], log
    )
    assert proc.wait(240) == 0, tail(log, 80)
    return out, err, app_id


def test_confluent_format_reads_with_avro_deserializer_and_the_events_are_byte_identical(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    log_url = f"sqlite:///{tmp_path / 'log.db'}"
    write_log(log_url, 1500, partitions=3)
    append_raw(log_url, REJECTED)
    rows = read_rows(log_url)
    plain, framed = (f"sr-{kind}-{uuid.uuid4().hex[:8]}" for kind in ("so", "cf"))
    done = source(log_url, plain)
    assert done.returncode == 0, done.stderr[-3000:]
    done = source(log_url, framed, *registry_flags(schema_registry))
    assert done.returncode == 0, done.stderr[-3000:]

    # the confluent topic: the same positions, each value the stored body behind 00 + an id
    so, cf = read_topic(kafka_bootstrap, plain), read_topic(kafka_bootstrap, framed)
    assert [m.position for m in so] == [m.position for m in cf] and len(cf) == len(rows)
    for a, b in zip(so, cf, strict=True):
        if not a.value:  # a marker: empty in single-object, null in confluent (read_topic gives b"")
            assert not b.value and b.header["olstream.type"] == b"RowRejected"
            continue
        assert framing.is_confluent(b.value) and b.value[5:] == a.value[codec.HEADER_LEN :]

    # another team's reader: the registry's URL and confluent-kafka's own deserializer, every message
    read = read_with_avro_deserializer(kafka_bootstrap, schema_registry, framed)
    assert len(read) == len(rows)
    kinds = Counter("marker" if value is None else "record" for value, _ in read)
    assert kinds == {"marker": len(REJECTED), "record": len(rows) - len(REJECTED)}
    for value, headers in read:
        position = (int(headers["olstream.partition"]), int(headers["olstream.offset"]))
        if value is None:
            assert headers["olstream.type"] == "RowRejected"
            continue
        stored = codec.decode(rows[position], *position)
        assert (value["partition"], value["offset"]) == position
        assert value.get("engine_run_id") == stored.engine_run_id  # type: ignore[union-attr]

    # the worker: the same events, byte for byte, from either topic; each valid OpenLineage
    so_out, so_err, so_app = run_worker(kafka_bootstrap, tmp_path, "so", plain)
    cf_out, cf_err, cf_app = run_worker(
        kafka_bootstrap, tmp_path, "cf", framed, "--schema-registry", schema_registry
    )
    so_events = consume_all(kafka_bootstrap, so_out, idle=1.0)
    cf_events = consume_all(kafka_bootstrap, cf_out, idle=1.0)
    assert len(so_events) > 300
    assert sorted((e.key, e.value) for e in so_events) == sorted((e.key, e.value) for e in cf_events)
    v = validator()
    for e in cf_events:
        v.validate(e.value)
    assert (
        consume_all(kafka_bootstrap, so_err, idle=0.5) == consume_all(kafka_bootstrap, cf_err, idle=0.5) == []
    )

    # explain finds a run's records in the confluent topic as in the other (with the registry)
    engine_run_id = next(
        value["engine_run_id"] for value, headers in read if value and headers["olstream.type"] == "RunEnded"
    )
    reports = {}
    for topic, out, extra in (
        (plain, so_out, ("--app-id", so_app)),
        (framed, cf_out, ("--app-id", cf_app, "--schema-registry", schema_registry)),
    ):
        done = explain(kafka_bootstrap, engine_run_id, topic, out, *extra)
        assert done.returncode == 0, done.stderr
        reports[topic] = json.loads(done.stdout)
    [so_run], [cf_run] = reports[plain]["runs"], reports[framed]["runs"]

    def records_of(run: dict) -> list[tuple[str, int]]:
        return [(r["type"], r["log_offset"]) for r in run["records"]]

    assert records_of(cf_run) == records_of(so_run) and records_of(so_run)[0][0] == "RunStarted"
    assert [e["type"] for e in cf_run["events"]] == [e["type"] for e in so_run["events"]]
    assert cf_run["state"]["status"] == so_run["state"]["status"] == "ended"
    refused = explain(kafka_bootstrap, engine_run_id, framed, cf_out)
    assert refused.returncode == ExitCode.CONFIG and "--schema-registry" in refused.stderr, refused.stderr


def test_a_schema_id_the_worker_cannot_resolve_stops_it_without_an_error_record(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path, make_topic
) -> None:
    stored = codec.encode(RECORDS[0])
    topic = make_topic(1)
    produce_raw(kafka_bootstrap, topic, b"0", framing.to_confluent(stored, 987_654))
    out, err = f"{topic}.events", f"{topic}.stream-errors"
    for name, extra, code, says in (
        ("no-registry", (), ExitCode.CONFIG, "no --schema-registry"),
        (
            "unknown-id",
            ("--schema-registry", schema_registry),
            ExitCode.SCHEMA_REGISTRY,
            "holds no schema id",
        ),
    ):
        log = tmp_path / f"{name}.log"
        cmd = worker_cmd(
            kafka_bootstrap, f"app-{name}-{uuid.uuid4().hex[:6]}", tmp_path / name, topic, out, err
        )
        proc = start_worker([*cmd, *extra, "--until-idle"], log)
        assert proc.wait(120) == code, tail(log, 60)
        assert says in log.read_text() and "987654" in log.read_text(), tail(log, 60)
    assert consume_all(kafka_bootstrap, err, idle=0.5) == [], "never an error record"
    assert consume_all(kafka_bootstrap, out, idle=0.5) == []
