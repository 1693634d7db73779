"""One suite for both event-log stores: SQLite (a file in tmp) and PostgreSQL (a fresh database)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from olstream.contract.codec import decode
from olstream.contract.records import DatasetDeclared, RunEnded, RunStarted
from olstream.eventlog.store import EventLogStore, StoredRow
from olstream.eventlog.stores import open_store
from olstream.eventlog.writer import EventLogWriter
from tests.support.paths import REPO

pytestmark = pytest.mark.integration



@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/events.db"
        return
    yield str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(log_url: str) -> Iterator[EventLogStore]:
    s = open_store(log_url, partitions=4, create=True)
    yield s
    s.close()


def _payload(partition: int, offset: int) -> bytes:
    return f"p{partition}-o{offset}".encode()


def test_partitions_are_fixed_at_creation(store: EventLogStore, log_url: str) -> None:
    assert store.partitions() == [0, 1, 2, 3]
    assert store.heads() == {0: -1, 1: -1, 2: -1, 3: -1}
    again = open_store(log_url)
    try:
        assert again.partitions() == [0, 1, 2, 3]
    finally:
        again.close()
    with pytest.raises(ValueError, match="4 partitions"):
        open_store(log_url, partitions=8, create=True)


def test_opening_a_missing_log_without_create_fails(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_store(f"sqlite:///{tmp_path}/absent.db")


def test_offsets_are_dense_per_partition_and_reads_page(store: EventLogStore) -> None:
    items = [(i % 3, lambda off, p=i % 3: _payload(p, off)) for i in range(30)]
    offsets = store.append_many(items)
    assert offsets[:6] == [0, 0, 0, 1, 1, 1]
    assert store.append(3, lambda off: _payload(3, off)) == 0
    assert store.append(0, lambda off: _payload(0, off)) == 10
    assert store.heads() == {0: 10, 1: 9, 2: 9, 3: 0}

    first = store.read(0, -1, 4)
    assert [r.offset for r in first] == [0, 1, 2, 3]
    assert first[0] == StoredRow(0, 0, b"p0-o0")
    rest = store.read(0, 3, 100)
    assert [r.offset for r in rest] == list(range(4, 11))
    assert all(r.payload == _payload(0, r.offset) for r in rest)
    assert store.read(0, 10, 100) == []
    assert store.read(3, -1, 100) == [StoredRow(3, 0, b"p3-o0")]
    with pytest.raises(ValueError, match="partition 4"):
        store.read(4, -1, 1)


def test_a_failed_build_appends_nothing(store: EventLogStore) -> None:
    def broken(offset: int) -> bytes:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        store.append_many([(1, lambda off: b"x"), (1, broken)])
    assert store.heads()[1] == -1
    assert store.append(1, lambda off: b"y") == 0


def test_non_ascii_records_round_trip_exactly(store: EventLogStore) -> None:
    """The store keeps every field byte for byte, namespaces included: records written by other
    writers reach the log unchecked (the writer API's own normalization is tested below)."""
    from datetime import UTC, datetime

    from olstream.contract.records import Direction, RunError, RunStatus

    t = datetime(2026, 1, 2, tzinfo=UTC)
    partition = 1
    writer = EventLogWriter(store)
    records_in = [
        RunStarted(partition, 0, t, "r-é", "tenant-ß", "équipe-données", "import_日本語", "v1",
                   "instance-ü-🚀", t),
        DatasetDeclared(partition, 0, t, "r-é", Direction.OUTPUT, "out", "s3://bücket",
                        "données/年度/報告.parquet", t),
        RunEnded(partition, 0, t, "r-é", RunStatus.FAILED, t, RunError("Fehler: Datei «x» fehlt")),
    ]  # fmt: skip
    for record in records_in:
        writer.append_record(record)
    rows = store.read(partition, -1, 10)
    records = [decode(r.payload, r.partition, r.offset) for r in rows]
    started, declared, ended = records
    assert isinstance(started, RunStarted) and started.workflow_instance == "instance-ü-🚀"
    assert started.namespace == "équipe-données" and started.workflow_type == "import_日本語"
    assert isinstance(declared, DatasetDeclared)
    assert (declared.dataset_namespace, declared.dataset_name) == ("s3://bücket", "données/年度/報告.parquet")
    assert isinstance(ended, RunEnded) and ended.error is not None
    assert ended.error.message == "Fehler: Datei «x» fehlt"
    assert [r.offset for r in records] == [0, 1, 2]


def test_the_writer_api_stores_namespaces_in_the_form_receivers_accept(store: EventLogStore) -> None:
    writer = EventLogWriter(store)
    run = writer.run_started(
        namespace="postgres://équipe.données.example:5432",
        workflow_type="import_日本語",
        workflow_version="v1",
        workflow_instance="instance-ü-🚀",
        task_id="tenant-ß",
    )
    run.dataset_output("out", "s3://bücket", "données/年度/報告.parquet")
    started, declared = (decode(r.payload, r.partition, r.offset) for r in store.read(run.partition, -1, 10))
    assert (
        isinstance(started, RunStarted)
        and started.namespace == "postgres://xn--quipe-9ra.xn--donnes-eva.example:5432"
    )
    assert started.workflow_instance == "instance-ü-🚀"  # only namespaces are normalized
    assert isinstance(declared, DatasetDeclared)
    assert (declared.dataset_namespace, declared.dataset_name) == (
        "s3://xn--bcket-kva",
        "données/年度/報告.parquet",
    )


def test_wait_for_change_wakes_a_reader_on_append(store: EventLogStore, log_url: str) -> None:
    reader = open_store(log_url)
    try:
        reader.wait_for_change(0.05)  # settle: LISTEN registered, nothing pending
        assert reader.wait_for_change(0.2) is False

        def append_later() -> None:
            time.sleep(0.3)
            store.append(2, lambda off: b"wake")

        t = threading.Thread(target=append_later)
        t.start()
        started = time.monotonic()
        woke = False
        while not woke and time.monotonic() - started < 5:
            woke = reader.wait_for_change(5)
        t.join()
        assert woke
        assert time.monotonic() - started < 3
        assert reader.read(2, -1, 10) == [StoredRow(2, 0, b"wake")]
    finally:
        reader.close()


_WRITER_SCRIPT = """
import sys
from olstream.eventlog.stores import open_store
url, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = open_store(url)
for i in range(0, n, 10):
    store.append_many([(j % 4, lambda off, j=j: f"{tag}:{j}".encode()) for j in range(i, min(i + 10, n))])
store.close()
"""


def test_concurrent_writer_processes_and_a_reader(store: EventLogStore, log_url: str) -> None:
    n = 400
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER_SCRIPT, log_url, tag, str(n)], env=env, cwd=REPO)
        for tag in ("a", "b")
    ]
    seen: dict[int, list[StoredRow]] = {p: [] for p in store.partitions()}
    deadline = time.monotonic() + 60
    try:
        while sum(len(v) for v in seen.values()) < 2 * n and time.monotonic() < deadline:
            for p, rows in seen.items():
                after = rows[-1].offset if rows else -1
                rows.extend(store.read(p, after, 50))
            store.wait_for_change(0.05)
    finally:
        for proc in procs:
            assert proc.wait(timeout=60) == 0
    for p, rows in seen.items():
        assert [r.offset for r in rows] == list(range(len(rows))), f"gap in partition {p}"
    payloads = sorted(r.payload.decode() for rows in seen.values() for r in rows)
    assert payloads == sorted(f"{tag}:{j}" for tag in ("a", "b") for j in range(n))


def test_log_simulate_command_writes_a_decodable_workload(log_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "olstream",
        "log",
        "simulate",
        "--log",
        log_url,
        "--runs",
        "120",
        "--seed",
        "4",
    ]
    out = subprocess.run(
        [*cmd, "--partitions", "4"], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "wrote 120 runs" in out.stdout and "open runs (no RunEnded)" in out.stdout
    store = open_store(log_url)
    try:
        rows = [row for p in store.partitions() for row in store.read(p, -1, 10_000)]
        records = [decode(r.payload, r.partition, r.offset) for r in rows]
        assert sum(isinstance(r, RunStarted) for r in records) == 120
        assert f"{len(rows)} records into 4 partitions" in out.stdout
    finally:
        store.close()
    mismatch = subprocess.run([*cmd, "--partitions", "8"], env=env, cwd=REPO, capture_output=True, text=True)
    assert mismatch.returncode == 1 and "4 partitions" in mismatch.stderr


@pytest.mark.postgres
def test_postgres_readers_poll_when_listen_is_unavailable(postgres_url: str) -> None:
    from olstream.eventlog.postgres_store import PostgresEventLogStore

    store = PostgresEventLogStore.open(postgres_url, partitions=2, create=True)
    reader = PostgresEventLogStore.open(postgres_url)
    reader._listen_failed = True  # as after a LISTEN error (e.g. behind a transaction pooler)
    try:
        assert reader.wait_for_change(0.15) is False
        threading.Timer(0.2, lambda: store.append(0, lambda off: b"polled")).start()
        assert reader.wait_for_change(3) is True
        assert reader.read(0, -1, 5) == [StoredRow(0, 0, b"polled")]
    finally:
        reader.close()
        store.close()


_SLOW_WRITER_SCRIPT = """
import sys, time
from olstream.eventlog.stores import open_store
store = open_store(sys.argv[1])

def slow(offset):
    print("locked", flush=True)
    time.sleep(2.5)  # holds the write transaction open
    return b"slow"

store.append(0, slow)
store.close()
"""


def test_a_long_write_transaction_blocks_writers_but_not_readers(store: EventLogStore, log_url: str) -> None:
    store.append(0, lambda off: b"before")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_WRITER_SCRIPT, log_url],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        started = time.monotonic()
        assert store.read(0, -1, 10) == [StoredRow(0, 0, b"before")]  # readers are not blocked
        assert store.heads()[0] == 0
        assert time.monotonic() - started < 1.5
        assert store.append(0, lambda off: b"after") == 2  # waits for the lock, then goes after it
        assert time.monotonic() - started > 1.0
    finally:
        assert proc.wait(timeout=30) == 0
    assert [r.payload for r in store.read(0, -1, 10)] == [b"before", b"slow", b"after"]


def test_an_unreachable_database_is_an_infrastructure_error() -> None:
    from olstream.shared.errors import InfrastructureError

    with pytest.raises(InfrastructureError, match="cannot connect to the event-log database") as info:
        open_store("postgresql://olstream:sekret@127.0.0.1:1/nope?connect_timeout=2")
    assert "sekret" not in str(info.value)
