"""The records topic's placement: log partition -> Kafka partition, its record, and the source's choice."""

from __future__ import annotations

import zlib

import pytest

from olstream.connectors.source.resume import TopicShape, choose_placement
from olstream.contract.placement import MAPPING_KEY, Placement, Scheme, spread
from olstream.shared.errors import PlacementError


@pytest.mark.parametrize("log_partitions", [1, 5, 8, 12, 13, 100])
@pytest.mark.parametrize("kafka_partitions", [1, 2, 3, 6, 12])
def test_modulo_spreads_k_log_partitions_over_n_kafka_partitions_within_one(
    log_partitions: int, kafka_partitions: int
) -> None:
    counts = spread(Placement(Scheme.MODULO, kafka_partitions), log_partitions)
    assert sum(counts) == log_partitions
    assert max(counts) - min(counts) <= 1


def test_key_hash_is_librdkafkas_crc32_of_the_key_and_leaves_the_issues_default_shape_uneven() -> None:
    key_hash = Placement(Scheme.KEY_HASH, 6)
    assert [key_hash.kafka_partition(p) for p in range(8)] == [5, 5, 1, 1, 4, 4, 4, 0]
    assert all(key_hash.kafka_partition(p) == zlib.crc32(str(p).encode()) % 6 for p in range(100))
    assert spread(key_hash, 8) == [1, 2, 0, 0, 3, 2]  # two Kafka partitions empty
    assert spread(Placement(Scheme.MODULO, 6), 8) == [2, 2, 1, 1, 1, 1]


def test_modulo_places_by_the_fixed_count_so_later_log_partitions_and_a_grown_topic_move_nothing() -> None:
    placement = Placement(Scheme.MODULO, 6)
    assert [placement.kafka_partition(p) for p in (0, 4, 5, 6, 11, 12, 47)] == [0, 4, 5, 0, 5, 0, 5]


@pytest.mark.parametrize("placement", [Placement(Scheme.MODULO, 12), Placement(Scheme.KEY_HASH, 6)])
def test_the_record_round_trips(placement: Placement) -> None:
    assert Placement.decode(placement.encode()) == placement
    assert Placement(Scheme.MODULO, 12).encode() == b"modulo:12"


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (b"round-robin:6", "'scheme'"),
        (b"modulo", "'partitions'"),
        (b"modulo:0", "'partitions'"),
        (None, "'scheme'"),
    ],
)
def test_a_bad_record_names_itself_and_the_field(value: bytes | None, field: str) -> None:
    with pytest.raises(PlacementError, match=field) as raised:
        Placement.decode(value)
    assert repr((value or b"").decode()) in str(raised.value)


def test_the_mapping_key_is_no_log_partitions_key() -> None:
    assert not MAPPING_KEY.isdigit()


def test_an_empty_topic_gets_modulo_over_its_count_and_a_written_one_keeps_key_hash() -> None:
    assert choose_placement(None, "t", TopicShape(12, written=False)) == (Placement(Scheme.MODULO, 12), True)
    assert choose_placement(None, "t", TopicShape(6, written=True)) == (Placement(Scheme.KEY_HASH, 6), True)


def test_a_recorded_placement_stands_even_when_the_topic_grew() -> None:
    recorded = Placement(Scheme.MODULO, 6)
    assert choose_placement(recorded, "t", TopicShape(9, written=True)) == (recorded, False)
    assert choose_placement(recorded, "t", TopicShape(6, written=False)) == (recorded, False)


def test_a_topic_with_fewer_partitions_than_its_recorded_placement_is_refused() -> None:
    with pytest.raises(PlacementError, match=r"records topic t has 4 partitions.*modulo:6.*'partitions'"):
        choose_placement(Placement(Scheme.MODULO, 6), "t", TopicShape(4, written=True))
