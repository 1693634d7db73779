"""The worker's transactions without a broker: the bounded retries of a transaction step
(`WorkerTransactions._retrying`: a call librdkafka says may be made again is made again; an
abortable, fatal or other error is raised at once), and what a failed call raises."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from olstream.streams.runtime import transactions
from olstream.streams.runtime.transaction_errors import GenerationFenced, ProducerFenced, TransactionFailed
from olstream.streams.runtime.transactions import WorkerTransactions


def _transactions() -> WorkerTransactions:
    return WorkerTransactions("127.0.0.1:1", "app-worker-x", "records", lambda: b"", transaction_timeout=10.0)


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
    _transactions()._retrying("send its offset", call)
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
        _transactions()._retrying("commit its transaction", call)
    assert raised.value.args[0] is error and len(calls) == 1


def test_a_retriable_error_past_the_deadline_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions, "RETRY_PAUSE_SECONDS", 0.0)
    monkeypatch.setattr(transactions, "CALL_TIMEOUT_SECONDS", 0.0)
    calls, call = _failing([KafkaError(KafkaError._TRANSPORT, "away", retriable=True)] * 5)
    with pytest.raises(KafkaException):
        _transactions()._retrying("send its offset", call)
    assert len(calls) == 1


@pytest.mark.parametrize(
    "code", [KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.FENCED_INSTANCE_ID]
)
def test_offsets_the_group_refuses_raise_generation_fenced(code: int) -> None:
    error = KafkaError(code, "refused", txn_requires_abort=True)
    with pytest.raises(GenerationFenced, match="the group refused this worker's input offsets"):
        _transactions()._raise("send the input offsets", KafkaException(error))


def test_a_fenced_epoch_raises_producer_fenced_and_is_kept_as_the_cause() -> None:
    txns = _transactions()
    fenced = KafkaError(KafkaError._FENCED, "fenced by newer producer instance", fatal=True)
    with pytest.raises(ProducerFenced, match="is fenced"):
        txns._raise("commit the transaction", KafkaException(fenced))
    assert txns.fatal is fenced
    # a producer in a fatal state answers only _FATAL later: the first cause is what is said
    with pytest.raises(ProducerFenced, match="fenced by newer producer instance"):
        txns._raise("send", KafkaException(KafkaError(KafkaError._FATAL, "Fatal error")))


@pytest.mark.parametrize(
    "error",
    [
        KafkaError(KafkaError._STATE, "Unable to produce message: Local: Erroneous state"),
        KafkaError(KafkaError._TIMED_OUT, "abortable", txn_requires_abort=True),
    ],
)
def test_a_send_refused_until_the_transaction_is_aborted_raises_transaction_failed(error: KafkaError) -> None:
    """A paused worker's transaction timed out by the broker: librdkafka refuses every send of it
    (a loop run of the paused-worker test ended SEND_FAILED on this before it was handled)."""
    with pytest.raises(TransactionFailed, match="must be aborted"):
        _transactions()._raise_for_send("send", KafkaException(error))


def test_a_fenced_send_is_still_producer_fenced() -> None:
    fenced = KafkaError(KafkaError._FENCED, "fenced by newer producer instance", fatal=True)
    with pytest.raises(ProducerFenced):
        _transactions()._raise_for_send("send", KafkaException(fenced))
