"""`retrying` and `not_ready` (olstream/shared/kafka_admin.py): what a broker failing over answers is
asked again; anything else is raised at once as an InfrastructureError naming the call."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from olstream.shared import kafka_admin
from olstream.shared.errors import InfrastructureError
from olstream.shared.kafka_admin import not_ready, retrying


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.OFFSET_NOT_AVAILABLE,  # a new leader's high watermark not caught up (failover)
    ],
)
def test_a_partition_whose_leader_moves_is_asked_again(code: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_admin, "RETRY_PAUSE", 0.0)
    assert not_ready(KafkaError(code))
    answers = [KafkaError(code), KafkaError(code)]

    def watermarks() -> tuple[int, int]:
        if answers:
            raise KafkaException(answers.pop())
        return (0, 7)

    assert retrying(watermarks, "reading the end offsets of t[2]", 5.0) == (0, 7)


def test_a_refusal_is_raised_at_once_naming_the_call() -> None:
    def refused() -> None:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    with pytest.raises(InfrastructureError, match="reading the end offsets of t"):
        retrying(refused, "reading the end offsets of t[2]", 5.0)
