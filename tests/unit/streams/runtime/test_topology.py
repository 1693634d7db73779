"""The worker and a grown input: the changelog grown to match (also when replicas race to grow it),
which partitions are new, and the exit that names them."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from olstream.shared.errors import ConfigError, ExitCode, InfrastructureError
from olstream.streams.runtime import topology


def test_only_partitions_beyond_the_start_count_are_grown() -> None:
    assert topology.grown_partitions([0, 1, 2], 3) == []
    assert topology.grown_partitions([5, 1, 3], 3) == [3, 5]


def test_a_grown_assignment_leaves_with_input_grew_and_names_topic_and_counts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(topology.os, "_exit", fake_exit)
    topology.check_assignment("olstream.eventlog", [0, 1], 3)  # nothing new: stays
    assert exits == []
    with caplog.at_level(logging.CRITICAL), pytest.raises(SystemExit):
        topology.check_assignment("olstream.eventlog", [2, 4], 3)
    assert exits == [ExitCode.INPUT_GREW]
    text = caplog.records[-1].getMessage()
    assert "olstream.eventlog grew from 3 partitions to at least 5" in text and "restart" in text


def test_the_changelog_keeps_the_name_faust_gave_the_table() -> None:
    # deployments that ran the worker with faust's table keep their changelog (and its states)
    assert topology.changelog_topic("olstream-x") == "olstream-x-runs-changelog"


class _FakeAdmin:
    """create_partitions answers with `error` (None: success) and records what it was asked."""

    def __init__(self, error: KafkaError | None) -> None:
        self.error = error
        self.asked: list[tuple[str, int]] = []

    def create_partitions(self, new: list[Any]) -> dict[str, Future[None]]:
        (request,) = new
        self.asked.append((request.topic, request.new_total_count))
        future: Future[None] = Future()
        if self.error is None:
            future.set_result(None)
        else:
            future.set_exception(KafkaException(self.error))
        return {request.topic: future}


def _broker(
    monkeypatch: pytest.MonkeyPatch, counts: list[int | None], error: KafkaError | None = None
) -> tuple[_FakeAdmin, list[int | None]]:
    """The changelog's partition count as the broker answers each read, in turn (the last one from
    then on), and an admin client whose growth fails with `error`; no I/O."""
    admin = _FakeAdmin(error)
    answered: list[int | None] = []

    def read(kafka: object, name: str, timeout: float = 10.0) -> int | None:
        assert name == topology.changelog_topic("app")
        answered.append(counts[min(len(answered), len(counts) - 1)])
        return answered[-1]

    monkeypatch.setattr(topology, "topic_partitions", read)
    monkeypatch.setattr(topology, "admin_client", lambda kafka: admin)
    monkeypatch.setattr(topology, "REREAD_PAUSE", 0.0)
    return admin, answered


ALREADY_GROWN = KafkaError(KafkaError.INVALID_PARTITIONS, "Topic already has 6 partition(s).")


def test_a_changelog_that_matches_the_input_or_is_missing_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for count in (6, None):
        admin, _ = _broker(monkeypatch, [count])
        topology.match_changelog("k:1", "app", "in", 6)
        assert admin.asked == []


def test_a_smaller_changelog_is_grown_to_the_input(monkeypatch: pytest.MonkeyPatch) -> None:
    admin, reads = _broker(monkeypatch, [3])
    topology.match_changelog("k:1", "app", "in", 6)
    assert admin.asked == [(topology.changelog_topic("app"), 6)] and reads == [3]


@pytest.mark.parametrize("grown_to", [6, 7])
def test_a_changelog_another_replica_grew_first_is_success(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, grown_to: int
) -> None:
    # read 3, the growth refused (INVALID_PARTITIONS: grown meanwhile), read again: 6 or more
    admin, reads = _broker(monkeypatch, [3, grown_to], ALREADY_GROWN)
    with caplog.at_level(logging.INFO, logger=topology.__name__):
        topology.match_changelog("k:1", "app", "in", 6)
    assert admin.asked == [(topology.changelog_topic("app"), 6)] and reads == [3, grown_to]
    assert f"has {grown_to} partitions already (another replica grew it)" in caplog.text


def test_a_refusal_is_read_again_until_the_broker_shows_the_growth(monkeypatch: pytest.MonkeyPatch) -> None:
    _, reads = _broker(monkeypatch, [3, 3, 3, 6], ALREADY_GROWN)  # metadata behind the controller
    topology.match_changelog("k:1", "app", "in", 6)
    assert reads == [3, 3, 3, 6]


def test_a_refusal_the_count_never_explains_is_an_infrastructure_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, reads = _broker(monkeypatch, [3], ALREADY_GROWN)
    with pytest.raises(InfrastructureError, match="cannot grow the changelog app-runs-changelog to 6"):
        topology.match_changelog("k:1", "app", "in", 6)
    assert reads == [3] * (1 + topology.REREADS)


def test_any_other_refusal_is_an_infrastructure_error_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    denied = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not allowed")
    _, reads = _broker(monkeypatch, [3, 6], denied)
    with pytest.raises(InfrastructureError, match="not allowed"):
        topology.match_changelog("k:1", "app", "in", 6)
    assert reads == [3]


def test_a_changelog_larger_than_the_input_before_growing_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admin, _ = _broker(monkeypatch, [8])
    with pytest.raises(ConfigError, match="start with a new --app-id"):
        topology.match_changelog("k:1", "app", "in", 6)
    assert admin.asked == []


def test_each_partition_store_has_bounded_rocksdb_memory(tmp_path: Path) -> None:
    """As RocksDB itself reports it: the block cache's capacity, and the options file it wrote."""
    import re

    from olstream.streams.runtime.run_store import PartitionStore

    store = PartitionStore(tmp_path / "0")
    try:
        assert store._db.property_int_value("rocksdb.block-cache-capacity") == 8 * 1024 * 1024
    finally:
        store.close()
    written = sorted((tmp_path / "0").glob("OPTIONS-*"))[-1].read_text()
    options = dict(re.findall(r"\s(write_buffer_size|max_write_buffer_number)=(\d+)", written))
    assert options == {"write_buffer_size": str(4 * 1024 * 1024), "max_write_buffer_number": "2"}


def test_the_garbage_collection_timer_counts_each_collection_from_start_to_stop() -> None:
    from olstream.streams.runtime.metrics import GarbageCollectionTimer

    timer = GarbageCollectionTimer()
    timer("start", {"generation": 2})
    timer("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
    assert timer.seconds > 0
    (family,) = timer.collect()
    (sample,) = [s for s in family.samples if s.name == "olstream_stream_gc_seconds_total"]
    assert sample.value == timer.seconds
