"""The bounded retries of a partition's transaction steps (`PartitionTransactions._retrying`): a call
librdkafka says may be made again is made again; an abortable, fatal or other error is raised at once."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from olstream.streams.runtime import transactions
from olstream.streams.runtime.transactions import PartitionTransactions


def _transactions() -> PartitionTransactions:
    return PartitionTransactions("127.0.0.1:1", "app", "records", lambda: None)


def _failing(errors: list[KafkaError]) -> tuple[list[int], Any]:
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        if errors:
            raise KafkaException(errors.pop(0))

    return calls, call


def test_a_retriable_error_makes_the_call_again_until_it_succeeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions, "RETRY_PAUSE_SECONDS", 0.0)
    transport = KafkaError(KafkaError._TRANSPORT, "Failed to add offsets to transaction", retriable=True)
    calls, call = _failing([transport, transport])
    _transactions()._retrying(1, "send its offset", call)
    assert len(calls) == 3


@pytest.mark.parametrize(
    "error",
    [
        KafkaError(KafkaError._TIMED_OUT, "abortable", retriable=True, txn_requires_abort=True),
        KafkaError(KafkaError._FENCED, "fenced", fatal=True),
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "refused"),
    ],
)
def test_any_other_error_is_raised_at_once(error: KafkaError, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions, "RETRY_PAUSE_SECONDS", 0.0)
    calls, call = _failing([error])
    with pytest.raises(KafkaException) as raised:
        _transactions()._retrying(1, "commit its transaction", call)
    assert raised.value.args[0] is error and len(calls) == 1


def test_a_retriable_error_past_the_deadline_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions, "RETRY_PAUSE_SECONDS", 0.0)
    monkeypatch.setattr(transactions, "CALL_TIMEOUT_SECONDS", 0.0)
    calls, call = _failing([KafkaError(KafkaError._TRANSPORT, "away", retriable=True)] * 5)
    with pytest.raises(KafkaException):
        _transactions()._retrying(1, "send its offset", call)
    assert len(calls) == 1
