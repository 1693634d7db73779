"""Pure parts of the source connector: row checks, headers (the wire contract), resume helpers, settings."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

import pytest

from olstream.connectors.source.resume import merge_positions, position_of
from olstream.connectors.source.rowcheck import RowChecker
from olstream.contract import codec
from olstream.contract.placement import Placement, Scheme
from olstream.contract.records import DatasetDeclared, Direction, RunEnded, RunError, RunStarted, RunStatus
from olstream.contract.wire import message_key
from olstream.eventlog.store import StoredRow
from olstream.shared.errors import ConfigError
from tests.support.cli_settings import build_parser_for_tests, settings_from_args

T = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def row_for(record: RunStarted | DatasetDeclared | RunEnded) -> StoredRow:
    return StoredRow(record.partition, record.offset, codec.encode(record))


def started(partition: int = 3, offset: int = 17) -> RunStarted:
    return RunStarted(partition, offset, T, "run-1", "tenant", "ns", "wf", "1", "inst", T)


def test_headers_of_a_good_row_follow_the_wire_contract() -> None:
    checker = RowChecker()
    for record in (
        started(),
        DatasetDeclared(3, 18, T, "run-1", Direction.OUTPUT, "k", "s3://b", "päth/ü", T),
        RunEnded(3, 19, T, "run-1", RunStatus.FAILED, T, RunError("boom", "E", "trace")),
    ):
        row = row_for(record)
        headers = checker.headers_for(row)
        assert headers == [
            ("olstream.partition", b"3"),
            ("olstream.offset", str(record.offset).encode()),
            ("olstream.type", type(record).__name__.encode()),
            ("olstream.fingerprint", row.payload[2:10].hex().encode()),
        ]
        assert len(dict(headers)["olstream.fingerprint"] or b"") == 16  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda b: b"", "bad magic or too short"),
        (lambda b: b"\x00\x01" + b[2:], "bad magic"),
        (lambda b: b[:2] + b"\xff" * 8 + b[10:], "unknown writer-schema fingerprint ffffffffffffffff"),
        (lambda b: b[: len(b) // 2], "corrupt RunStarted body"),
        (lambda b: b + b"\x00\x00", "2 trailing bytes after the RunStarted body"),
    ],
)
def test_rows_that_do_not_decode_get_a_reason(mangle, reason) -> None:  # type: ignore[no-untyped-def]
    good = row_for(started())
    bad = StoredRow(good.partition, good.offset, mangle(good.payload))
    result = RowChecker().headers_for(bad)
    assert isinstance(result, str)
    assert reason in result
    with pytest.raises(codec.DecodeError):
        codec.decode(bad.payload, bad.partition, bad.offset)


def test_a_record_stored_at_another_position_is_an_error() -> None:
    row = row_for(started(partition=3, offset=17))
    moved = StoredRow(3, 18, row.payload)
    result = RowChecker().headers_for(moved)
    assert isinstance(result, str)
    assert "(3, 17)" in result


def test_error_headers_name_position_fingerprint_and_reason() -> None:
    payload = row_for(started()).payload
    row = StoredRow(5, 9, payload[:12])
    headers = dict(RowChecker().error_headers(row, "corrupt RunStarted body: EOF"))
    assert headers == {
        "olstream.partition": b"5",
        "olstream.offset": b"9",
        "olstream.type": b"RunStarted",
        "olstream.fingerprint": payload[2:10].hex().encode(),
        "olstream.error": b"corrupt RunStarted body: EOF",
    }
    assert dict(RowChecker().error_headers(StoredRow(0, 0, b"zz"), "too short")).keys() == {
        "olstream.partition",
        "olstream.offset",
        "olstream.error",
    }


def test_keys_and_the_partitioner_hint() -> None:
    assert message_key(3) == b"3"
    assert message_key(12) == b"12"
    key_hash = Placement(Scheme.KEY_HASH, 6)
    assert {key_hash.kafka_partition(p) for p in range(64)} == set(range(6))
    assert Placement(Scheme.KEY_HASH, 1).kafka_partition(7) == 0


def test_position_from_headers_and_merging_topics() -> None:
    assert position_of([("olstream.partition", b"4"), ("olstream.offset", b"99"), ("x", None)]) == (4, 99)
    assert position_of({"olstream.partition": b"4", "olstream.offset": b"1"}) == (4, 1)
    assert position_of([("olstream.partition", b"4")]) is None
    assert position_of(None) is None
    # a row re-driven by `olstream errors redrive` sits at the topic's end with its old position
    redriven = [("olstream.partition", b"4"), ("olstream.offset", b"1"), ("olstream.redrive.attempt", b"1")]
    assert position_of(redriven) is None
    assert merge_positions({0: 5, 1: 7}, {1: 9, 2: 0}, {}) == {0: 5, 1: 9, 2: 0}


def parse(*argv: str) -> argparse.Namespace:
    return build_parser_for_tests().parse_args(["source", *argv])


def test_settings_from_flags_env_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OLSTREAM_LOG_URL",
        "OLSTREAM_KAFKA_BOOTSTRAP",
        "OLSTREAM_RECORDS_TOPIC",
        "OLSTREAM_METRICS_PORT",
    ):
        monkeypatch.delenv(name, raising=False)
    s = settings_from_args(parse("--log", "sqlite:///tmp/x.db"))
    assert (s.topic, s.errors_topic, s.partitions, s.bootstrap) == (
        "olstream.eventlog",
        "olstream.eventlog.errors",
        None,  # a records topic it creates gets as many partitions as the log has
        "127.0.0.1:9092",
    )
    assert settings_from_args(parse("--log", "sqlite:///tmp/x.db", "--partitions", "12")).partitions == 12
    assert (s.idle_seconds, s.connect_timeout, s.metrics_port, s.exactly_once) == (2.0, 15.0, 0, False)
    monkeypatch.setenv("OLSTREAM_KAFKA_BOOTSTRAP", "k:1")
    monkeypatch.setenv("OLSTREAM_RECORDS_TOPIC", "t")
    monkeypatch.setenv("OLSTREAM_LOG_URL", "sqlite:///tmp/y.db")
    s = settings_from_args(parse("--until-idle", "--exactly-once", "--metrics-port", "9100"))
    assert (s.log_url, s.bootstrap, s.topic, s.errors_topic) == ("sqlite:///tmp/y.db", "k:1", "t", "t.errors")
    assert s.until_idle and s.exactly_once and s.metrics_port == 9100
    assert settings_from_args(parse("--bootstrap", "b:2")).bootstrap == "b:2"


def test_missing_log_and_bad_numbers_are_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLSTREAM_LOG_URL", raising=False)
    with pytest.raises(ConfigError, match="--log"):
        settings_from_args(parse())
    with pytest.raises(ConfigError, match="--partitions"):
        settings_from_args(parse("--log", "sqlite:///x.db", "--partitions", "0"))


def test_transactional_id_is_stable_per_topic_and_log_and_hides_credentials() -> None:
    a = settings_from_args(parse("--log", "postgresql://u:secret@h:5432/db"))
    b = settings_from_args(parse("--log", "postgresql://u:other@h:5432/db"))
    c = settings_from_args(parse("--log", "postgresql://u:secret@h:5432/db", "--topic", "t2"))
    assert a.transactional_id == b.transactional_id != c.transactional_id
    assert "secret" not in a.transactional_id
    assert a.transactional_id.startswith("olstream-source-olstream.eventlog-")


def test_wire_format_and_registry_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OLSTREAM_SCHEMA_REGISTRY",
        "OLSTREAM_SOURCE_WIRE_FORMAT",
        "OLSTREAM_SOURCE_SCHEMA_COMPATIBILITY",
    ):
        monkeypatch.delenv(name, raising=False)
    s = settings_from_args(parse("--log", "sqlite:///x.db"))
    assert (s.schema_registry, s.wire_format, s.schema_compatibility) == (None, "single-object", "BACKWARD")
    with pytest.raises(ConfigError, match="--wire-format confluent needs --schema-registry"):
        settings_from_args(parse("--log", "sqlite:///x.db", "--wire-format", "confluent"))
    with pytest.raises(ConfigError, match="needs --schema-registry"):
        settings_from_args(parse("--log", "sqlite:///x.db", "--schema-registry-user-info", "u:p"))
    s = settings_from_args(
        parse(
            "--log", "sqlite:///x.db", "--wire-format", "confluent", "--schema-compatibility", "full",
            "--schema-registry", "https://sr:8081/", "--schema-registry-user-info", "u:s3cret",
        )
    )  # fmt: skip
    assert s.wire_format == "confluent" and s.schema_compatibility == "FULL"
    assert s.schema_registry is not None and s.schema_registry.url == "https://sr:8081"
    conf = s.schema_registry.client_config()
    assert conf["basic.auth.user.info"] == "u:s3cret" and conf["basic.auth.credentials.source"] == "USER_INFO"
    assert "s3cret" not in repr(s.schema_registry)
    with pytest.raises(ConfigError, match="BACKWARD, "):
        settings_from_args(parse("--log", "sqlite:///x.db", "--schema-compatibility", "sideways"))
    with pytest.raises(ConfigError, match="user:password"):
        settings_from_args(
            parse("--log", "x.db", "--schema-registry", "http://r", "--schema-registry-user-info", "u")
        )


def test_confluent_rows_carry_the_schema_id_and_the_same_body() -> None:
    from olstream.connectors.source.framing import RowFraming
    from olstream.contract import framing

    row = row_for(started())
    fp = codec.fingerprint_of("RunStarted")
    out = RowFraming({fp: 12}).row(row)
    assert (out.partition, out.offset) == (row.partition, row.offset)
    assert out.payload == framing.to_confluent(row.payload, 12)
    with pytest.raises(ConfigError, match="partition 3, offset 17"):
        RowFraming({}).row(row)
