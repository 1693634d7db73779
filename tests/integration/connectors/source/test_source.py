"""The source connector against a real broker and real stores (SQLite and PostgreSQL).

Each store kind gets one 200,000-record log per session (written in batch mode); each test
publishes it to its own topics. Kill tests stop the connector with SIGKILL at random moments
while it publishes, restart it, and check every (partition, offset) against the store.
"""

from __future__ import annotations

import random
import re
import signal
import sqlite3
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_END, TopicPartition
from confluent_kafka.admin import AdminClient

from olstream.contract import codec
from olstream.devkit import kafka, postgres
from olstream.devkit.kafka_config import DEFAULT_KAFKA_VERSION, KafkaSettings
from olstream.devkit.process import free_port
from tests.support.source_support import (
    append_raw,
    assert_complete_and_ordered,
    by_log_partition,
    markers,
    message_count,
    read_rows,
    read_topic,
    run_source,
    start_source,
    wait_for_text,
    write_log,
)

pytestmark = pytest.mark.integration

BACKFILL_RECORDS = 200_000
CLEAN_RUN_RECORDS = 60_000
STORES = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


LogCache = dict[tuple[str, int], tuple[str, dict[tuple[int, int], bytes]]]


@pytest.fixture(scope="session")
def session_logs() -> LogCache:
    """(store kind, size) -> (URL, rows) of a log created on first use, once per session."""
    return {}


@pytest.fixture(scope="session")
def session_pg_databases(postgres_server: str) -> Iterator[list[str]]:
    """The session logs' PostgreSQL databases, dropped before the server they live on stops."""
    urls: list[str] = []
    yield urls
    for url in urls:
        postgres.drop_database(url)


def _session_log(request: pytest.FixtureRequest, cache: LogCache, size: int):  # type: ignore[no-untyped-def]
    kind = request.param
    if (kind, size) not in cache:
        if kind == "sqlite":
            url = f"sqlite:///{request.getfixturevalue('tmp_path_factory').mktemp('log') / 'events.db'}"
        else:
            url = postgres.create_test_database(request.getfixturevalue("postgres_server"))
            request.getfixturevalue("session_pg_databases").append(url)
        write_log(url, size)
        cache[(kind, size)] = (url, read_rows(url))
    return cache[(kind, size)]


@pytest.fixture
def backfill(request: pytest.FixtureRequest, session_logs: LogCache):  # type: ignore[no-untyped-def]
    """A 200,000-record log of the parameter's store kind."""
    return _session_log(request, session_logs, BACKFILL_RECORDS)


@pytest.fixture
def simulated(request: pytest.FixtureRequest, session_logs: LogCache):  # type: ignore[no-untyped-def]
    """A log of 60,000 records of the parameter's store kind."""
    return _session_log(request, session_logs, CLEAN_RUN_RECORDS)


@pytest.fixture
def small_log(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh log of a few thousand records in the store kind of the test's parameter."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'events.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    write_log(url, 3_000)
    return url


@pytest.mark.parametrize("simulated", STORES, indirect=True)
def test_clean_run_publishes_every_record_once_in_order_and_a_second_run_nothing(
    simulated, kafka_bootstrap, unique_topic, olstream_cmd, subprocess_env  # type: ignore[no-untyped-def]
) -> None:
    url, rows = simulated
    first = run_source(olstream_cmd, subprocess_env, url, unique_topic, "--metrics-port", "0")
    assert first.returncode == 0, first.stderr[-3000:]
    messages = read_topic(kafka_bootstrap, unique_topic)
    assert len(messages) == len(rows) >= 50_000
    assert assert_complete_and_ordered(messages, rows, exactly_once=True) == 0
    assert {m.header["olstream.type"] for m in messages} == {b"RunStarted", b"DatasetDeclared", b"RunEnded"}

    second = run_source(olstream_cmd, subprocess_env, url, unique_topic)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "0 records published" in second.stderr
    assert "not where its placement" not in second.stderr  # the resume scan found each one where placed
    assert message_count(kafka_bootstrap, unique_topic) == len(rows)
    assert message_count(kafka_bootstrap, f"{unique_topic}.errors") == 0


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
@pytest.mark.parametrize("backfill", STORES, indirect=True)
def test_kill_9_five_times_during_the_backfill_loses_nothing(
    backfill, exactly_once, kafka_bootstrap, unique_topic, olstream_cmd, subprocess_env, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    url, rows = backfill
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    extra = ("--exactly-once",) if exactly_once else ()
    for i in range(5):
        err = tmp_path / f"run{i}.log"
        proc = start_source(olstream_cmd, subprocess_env, url, unique_topic, err, *extra)
        try:
            wait_for_text(err, "resuming after")
            time.sleep(rng.uniform(0.05, 0.3))  # five kills well inside a 200,000-record backfill
            assert proc.poll() is None, f"seed {seed}: run {i} ended early:\n{err.read_text()[-2000:]}"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    final = run_source(olstream_cmd, subprocess_env, url, unique_topic, *extra)
    assert final.returncode == 0, final.stderr[-3000:]
    published = re.search(r"stopped: (\d+) records published", final.stderr)
    assert published and int(published.group(1)) > 0, f"seed {seed}: the kills came after the backfill ended"
    # read_uncommitted sees every copy ever written (exactly-once: aborted ones too); read_committed sees
    # what a consumer of the pipeline sees: each offset exactly once with transactions
    committed = read_topic(kafka_bootstrap, unique_topic, read_committed=exactly_once)
    assert_complete_and_ordered(committed, rows, exactly_once=exactly_once)


def corrupt_rows() -> list[tuple[str, bytes]]:
    good = next(iter(codec.current_schemas().values()))
    return [
        ("not Avro single-object encoding", b"\x00garbage"),
        ("unknown writer-schema fingerprint", b"\xc3\x01" + b"\x99" * 8 + b"\x02\x04"),
        ("body", b"\xc3\x01" + good.fingerprint + b"\x02"),
    ]


@pytest.mark.parametrize(
    ("small_log", "extra"),
    [pytest.param(p.values[0], (), id=p.id, marks=p.marks) for p in STORES]
    + [pytest.param("sqlite", ("--exactly-once",), id="sqlite-exactly-once")],
    indirect=["small_log"],
)
def test_corrupt_rows_go_to_the_errors_topic_and_the_rest_flows(
    small_log, extra, kafka_bootstrap, unique_topic, olstream_cmd, subprocess_env  # type: ignore[no-untyped-def]
) -> None:
    url = small_log
    bad = corrupt_rows()
    corrupt_at = append_raw(url, [(p, b) for p in (0, 1) for _, b in bad])
    # more good rows after them in partition 0; partition 1 ends on a corrupt row
    good_tail = read_rows(url)[(2, 0)]
    append_raw(url, [(0, _moved(good_tail, 0, corrupt_at[2] + 1))])

    first = run_source(olstream_cmd, subprocess_env, url, unique_topic, *extra)
    assert first.returncode == 0, first.stderr[-3000:]
    rows = read_rows(url)
    positions = zip([0, 0, 0, 1, 1, 1], corrupt_at, strict=True)
    kinds = {pos: bad[i % 3][0] for i, pos in enumerate(positions)}
    corrupt = set(kinds)
    errors = read_topic(kafka_bootstrap, f"{unique_topic}.errors", read_committed=True)
    assert sorted(m.position for m in errors) == sorted(corrupt)
    for m in errors:
        reason = m.header["olstream.error"].decode()
        assert kinds[m.position] in reason, reason
        assert m.key == str(m.position[0]).encode() and m.value == rows[m.position]
    good = {pos: b for pos, b in rows.items() if pos not in corrupt}
    published = read_topic(kafka_bootstrap, unique_topic, read_committed=True)
    assert_complete_and_ordered(published, good, exactly_once=True)
    assert sorted(markers(published)) == sorted(corrupt), "each corrupt row leaves its position marker"
    assert first.stderr.count("does not decode") == 6

    # a corrupt last row is not published again, and rows appended after it still flow
    second = run_source(olstream_cmd, subprocess_env, url, unique_topic, *extra)
    assert "0 records published, 0 sent" in second.stderr, second.stderr[-2000:]
    append_raw(url, [(1, _moved(good_tail, 1, corrupt_at[5] + 1))])
    third = run_source(olstream_cmd, subprocess_env, url, unique_topic, *extra)
    assert "1 records published, 0 sent" in third.stderr, third.stderr[-2000:]
    assert len(read_topic(kafka_bootstrap, f"{unique_topic}.errors", read_committed=True)) == 6


def _moved(payload: bytes, partition: int, offset: int) -> bytes:
    """A good record's bytes re-encoded for another position."""
    import dataclasses

    record = codec.decode(payload)
    return codec.encode(dataclasses.replace(record, partition=partition, offset=offset))


def test_a_gap_is_logged_with_both_ends_and_skipped(
    tmp_path, kafka_bootstrap, unique_topic, olstream_cmd, subprocess_env  # type: ignore[no-untyped-def]
) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    write_log(url, 2_000)
    with sqlite3.connect(tmp_path / "events.db") as db:
        db.execute('DELETE FROM events WHERE "partition" = 3 AND "offset" BETWEEN 10 AND 12')
    result = run_source(olstream_cmd, subprocess_env, url, unique_topic, "--gap-grace", "0.2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "gap in log partition 3: offsets 10..12 are missing; continuing at offset 13" in result.stderr
    offsets = [m.position[1] for m in by_log_partition(read_topic(kafka_bootstrap, unique_topic))[3]]
    assert offsets[:12] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 14]


def test_an_unreachable_broker_at_start_exits_2_with_a_clear_error(
    tmp_path, olstream_cmd, subprocess_env  # type: ignore[no-untyped-def]
) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    write_log(url, 10)
    started = time.monotonic()
    result = subprocess.run(
        [*olstream_cmd, "source", "--log", url, "--bootstrap", "127.0.0.1:1", "--wait", "2"],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "Kafka at 127.0.0.1:1 did not answer within 2 s" in result.stderr
    assert time.monotonic() - started < 30


@pytest.mark.slow
def test_a_broker_that_goes_away_while_running_is_waited_for(
    tmp_path, unique_topic, olstream_cmd, subprocess_env  # type: ignore[no-untyped-def]
) -> None:
    """Our own broker (the shared one must stay up): stop it mid-stream, write more, start it again."""
    port = free_port()
    settings = KafkaSettings(
        version=DEFAULT_KAFKA_VERSION,
        port=port,
        controller_port=free_port(avoid=frozenset({port})),
        data_dir=tmp_path / "kafka",
    )
    kafka.start_broker(settings)
    url = f"sqlite:///{tmp_path / 'events.db'}"
    write_log(url, 20_000)
    env = {**subprocess_env, "OLSTREAM_KAFKA_BOOTSTRAP": settings.bootstrap}
    proc = start_source(olstream_cmd, env, url, unique_topic, tmp_path / "source.log")
    try:
        wait_for_text(tmp_path / "source.log", "resuming after")
        _wait_until(lambda: message_count(settings.bootstrap, unique_topic) >= 20_000, 60)
        kafka.stop_broker(settings.data_dir)
        write_log(url, 3_000, seed=1000)  # written while Kafka is away
        time.sleep(2)
        kafka.start_broker(settings)
        write_log(url, 3_000, seed=2000)
        rows = read_rows(url)
        _wait_until(lambda: message_count(settings.bootstrap, unique_topic) >= len(rows), 90)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert_complete_and_ordered(read_topic(settings.bootstrap, unique_topic), rows, exactly_once=True)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kafka.stop_broker(settings.data_dir)


def _wait_until(condition, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        name: float(value)
        for name, value in re.findall(r"^(olstream_source_[^\s]+) (\S+)$", text, re.M)
    }


@pytest.mark.parametrize("small_log", STORES[:1], indirect=True)
def test_it_tails_new_rows_serves_metrics_and_stops_cleanly_on_sigterm(
    small_log, kafka_bootstrap, unique_topic, olstream_cmd, subprocess_env, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    url = small_log
    port = free_port()
    log_path = tmp_path / "source.log"
    extra = ("--metrics-port", str(port))
    proc = start_source(olstream_cmd, subprocess_env, url, unique_topic, log_path, *extra)
    try:
        wait_for_text(log_path, "resuming after")
        first = len(read_rows(url))
        _wait_until(lambda: _metrics(port).get("olstream_source_records_published_total") == first, 30)
        write_log(url, 500, seed=99)  # appended while it tails
        rows = read_rows(url)
        _wait_until(lambda: _metrics(port).get("olstream_source_records_published_total") == len(rows), 30)
        metrics = _metrics(port)
        lags = {k: v for k, v in metrics.items() if k.startswith("olstream_source_partition_lag{")}
        assert len(lags) == 8 and set(lags.values()) == {0.0}, metrics
        assert metrics['olstream_source_errors_total{kind="decode"}'] == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "got SIGTERM: flushing and stopping" in log_path.read_text()
    assert_complete_and_ordered(read_topic(kafka_bootstrap, unique_topic), rows, exactly_once=True)


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_positions_survive_retention_deleting_the_records_topic(
    exactly_once, tmp_path, kafka_bootstrap, unique_topic, olstream_cmd, subprocess_env  # type: ignore[no-untyped-def]
) -> None:
    """The tail of the records topic is gone (retention): the offsets topic still says where to go on."""
    url = f"sqlite:///{tmp_path / 'events.db'}"
    write_log(url, 2_000)
    extra = ("--exactly-once",) if exactly_once else ()
    first = run_source(olstream_cmd, subprocess_env, url, unique_topic, *extra)
    assert first.returncode == 0, first.stderr[-3000:]
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    parts = admin.list_topics(unique_topic, timeout=10).topics[unique_topic].partitions
    futures = admin.delete_records([TopicPartition(unique_topic, p, OFFSET_END) for p in parts])
    for future in futures.values():
        future.result(timeout=30)
    write_log(url, 300, seed=5)
    second = run_source(olstream_cmd, subprocess_env, url, unique_topic, *extra)
    assert second.returncode == 0, second.stderr[-3000:]
    assert _published_count(second.stderr) == len(read_rows(url)) - _published_count(first.stderr)


def _published_count(stderr: str) -> int:
    found = re.search(r"stopped: (\d+) records published", stderr)
    assert found is not None, stderr[-2000:]
    return int(found.group(1))
