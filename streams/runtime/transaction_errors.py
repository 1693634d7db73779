"""What a failed call of the worker's transactional producer means (``transactions``): the batch's
transaction can never commit (`Fenced`: by the producer's epoch, by the group's generation, or a
transaction librdkafka wants aborted), or a call never returned (`CallStuck`)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from olstream.shared.errors import DeliveryError

_FENCED_CODES = {KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
_PRODUCER_FENCED = getattr(KafkaError, "PRODUCER_FENCED", None)
if _PRODUCER_FENCED is not None:
    _FENCED_CODES.add(_PRODUCER_FENCED)
# the group moved on: this worker's generation or membership is not the group's any more
_GENERATION_CODES = {
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.FENCED_INSTANCE_ID,
    KafkaError.REBALANCE_IN_PROGRESS,
}


class Fenced(DeliveryError):
    """The batch's transaction can never commit: the batch is dropped, its records read again."""


class ProducerFenced(Fenced):
    """The producer's epoch is fenced: the broker aborted its transaction (open past the transaction
    timeout), or another process initialised the worker's transactional id."""


class GenerationFenced(Fenced):
    """The group refused this worker's offsets: it is not a member of the group's current generation
    (the group dropped it; a rebalance gives it partitions again)."""


class TransactionFailed(Fenced):
    """A send found the open transaction failed (librdkafka refuses sends until it is aborted: a
    transaction the broker timed out, a send the broker refused)."""


class CallStuck(DeliveryError):
    """A producer call still blocked well past its own timeout (librdkafka issues 5456, 5511)."""


def fenced(error: KafkaError) -> bool:
    return bool(error.code() in _FENCED_CODES)


def generation_refused(error: KafkaError) -> bool:
    return bool(error.code() in _GENERATION_CODES)


def kafka_error(e: BaseException | None) -> KafkaError | None:
    """The KafkaError of a KafkaException, or of the one a SystemError was raised over (confluent-kafka
    raises SystemError when a callback runs while a call's KafkaException is pending)."""
    while e is not None:
        if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
            return e.args[0]
        e = e.__cause__ or e.__context__
    return None
