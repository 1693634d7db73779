"""`--processing-guarantee exactly_once`: one Kafka transaction per input partition and checkpoint.

Each assigned input partition has a transactional producer of its own, with the transactional id
``{app id}-{input topic}-{partition}`` (one id per input partition, as Kafka Streams' first
exactly-once mode and faust's own do). Everything a batch's records of that partition produce goes
into its open transaction: the RunEvents, the error records and the run-state changelog writes;
the checkpoint adds the partition's input offset (``send_offsets_to_transaction`` with the group
metadata of a consumer of the worker's group that never subscribes) and commits.

**Fencing.** A worker that takes a partition initialises the partition's producer before it reads
anything of it (`assign`): the broker aborts the previous owner's open transaction and refuses
every later call of the previous owner's producer (``_FENCED``, fatal). So a worker the group
dropped while it was paused (a GC pause, CPU throttling, a VM migration) can never make anything
visible once another worker has taken its partitions: its sends are fenced, and a read_committed
subscriber never sees them. The new owner reads the committed offsets after that initialisation,
so it also sees whatever the previous owner committed before it.

**Errors.** A fenced producer raises `ProducerFenced`: the worker drops its batch and waits for the
rebalance that must follow (``olstream.streams.runtime.agent``; exit ``FENCED`` when none comes).
An abortable error (a broker failing over, a send that failed) aborts the partition's
transaction and sends its messages again in a new one, up to `ATTEMPTS` times; then, or on any
other error, `DeliveryError` (exit ``SEND_FAILED``).

**A call that never returns.** librdkafka's ``send_offsets_to_transaction`` can block past its
timeout, for good, when the broker of the group's coordinator died (librdkafka issues 5456 and
5511, open in 2.16): one run of ten of the broker-kill test hung so. It runs on a thread of its
own, waited for `SEND_OFFSETS_TIMEOUT_SECONDS` plus a margin; a call still blocked by then leaves
its producer behind (kept, never closed: a thread still waits in it) for a new one of the same
transactional id, whose initialisation fences the old one and aborts its transaction, and the
batch's messages are sent again in the new one (one of the `ATTEMPTS`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from functools import partial
from typing import Any, NoReturn

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from olstream.shared.errors import DeliveryError
from olstream.shared.kafka_clients import Kafka, producer_config
from olstream.shared.produce import produce
from olstream.streams.runtime.sender import Headers

log = logging.getLogger(__name__)

ATTEMPTS = 3  # transactions of one partition's batch before the worker gives up (SEND_FAILED)
TRANSACTION_TIMEOUT_MS = 30_000  # the broker aborts a transaction left open longer (a dead worker)
CALL_TIMEOUT_SECONDS = 60.0  # init, commit, abort
# sending a batch's input offset (8-10 ms when well); below the transaction timeout
SEND_OFFSETS_TIMEOUT_SECONDS = 20.0
STUCK_MARGIN_SECONDS = 5.0  # past its own timeout, a call is taken as never returning
RETRY_PAUSE_SECONDS = 0.5  # between calls of a transaction step that librdkafka says may be retried

# topic, key, value, headers, partition, on_delivery: one produce of an open transaction
Produced = tuple[str, bytes | None, bytes | None, Headers | None, int | None, Any]

_FENCED_CODES = {KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
_PRODUCER_FENCED = getattr(KafkaError, "PRODUCER_FENCED", None)
if _PRODUCER_FENCED is not None:
    _FENCED_CODES.add(_PRODUCER_FENCED)


class ProducerFenced(DeliveryError):
    """Another worker initialised this input partition's transactional id: it owns the partition now."""


class CallStuck(DeliveryError):
    """A producer call still blocked well past its own timeout (librdkafka issues 5456, 5511)."""


def transactional_id(app_id: str, input_topic: str, partition: int) -> str:
    return f"{app_id}-{input_topic}-{partition}"


def _fenced(error: KafkaError) -> bool:
    return bool(error.code() in _FENCED_CODES)


class PartitionTransactions:
    """A transactional producer per assigned input partition, the open transactions, and their commit.

    The agent names the input partition whose record it processes (`select`); `send` then produces
    into that partition's transaction, and `send_changelog` into the transaction of the partition
    it names. `commit` runs on a thread (it blocks).
    """

    def __init__(
        self,
        kafka: Kafka,
        app_id: str,
        input_topic: str,
        group_metadata: Callable[[], Any],
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.kafka = kafka
        self.app_id = app_id
        self.input_topic = input_topic
        self.group_metadata = group_metadata
        self.extra = extra or {}
        self.producers: dict[int, Producer] = {}
        self.produced: dict[int, list[Produced]] = {}  # the open transaction's produces, per partition
        self.current = -1  # the input partition whose record is being processed
        self._acked = threading.Lock()
        self._changelog_acked: dict[int, int] = {}  # changelog partition -> highest acknowledged offset
        # each producer's first fatal error: later calls of a producer in a fatal state answer only
        # _FATAL ("Unable to produce message: Local: Fatal error")
        self.fatal: dict[int, KafkaError] = {}
        self.stuck: list[Producer] = []  # replaced while a call of theirs still blocked: kept alive

    # ------------------------------------------------------------------ assignment

    def _new_producer(self, partition: int) -> Producer:
        config = producer_config(
            self.kafka,
            {
                "transactional.id": transactional_id(self.app_id, self.input_topic, partition),
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "linger.ms": 5,
                "batch.num.messages": 10_000,
                "queue.buffering.max.messages": 500_000,
                "partitioner": "murmur2_random",
                **self.extra,
            },
        )
        producer = Producer(config)
        try:
            # fences the previous owner's producer and ends its open transaction
            producer.init_transactions(CALL_TIMEOUT_SECONDS)
        except KafkaException as e:
            raise DeliveryError(
                f"cannot initialise the transactional producer of input partition {partition} "
                f"({transactional_id(self.app_id, self.input_topic, partition)}): {e.args[0]}; a "
                "Kafka-compatible service without transactions needs --processing-guarantee "
                f"at_least_once, and with ACLs the worker needs Write and Describe on transactional "
                f"ids with the prefix {self.app_id}-"
            ) from e
        return producer

    def assign(self, partitions: list[int]) -> None:
        """A fresh, initialised producer per assigned partition (blocking; in parallel): any other
        producer of the same transactional id, a previous owner's, is fenced from then on."""
        self.close()
        self.fatal.clear()
        if not partitions:
            return
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=min(8, len(partitions))) as pool:
            producers = dict(zip(partitions, pool.map(self._new_producer, partitions), strict=True))
        self.producers = producers
        log.info(
            "transactional producers of input partitions %s initialised in %.3f s (any previous "
            "owner's fenced)",
            partitions,
            time.monotonic() - started,
        )

    def close(self) -> None:
        """Drop every producer (their transactions are committed by then, or abandoned: aborted by
        the partition's next owner, or by the broker after the transaction timeout)."""
        producers, self.producers = self.producers, {}
        self.produced.clear()
        for producer in producers.values():
            try:
                producer.flush(0)
            except KafkaException as e:  # fenced meanwhile: nothing of it can land anyway
                log.debug("closing a transactional producer: %s", e)

    def abort_open(self) -> None:
        """Abort every open transaction (blocking); a fenced producer's is aborted by its new owner."""
        for partition in sorted(self.produced):
            try:
                self.producers[partition].abort_transaction(CALL_TIMEOUT_SECONDS)
            except KafkaException as e:
                log.info("input partition %d: its transaction is not aborted here: %s", partition, e.args[0])
        self.produced.clear()

    # ------------------------------------------------------------------ sends

    def select(self, partition: int) -> None:
        self.current = partition

    def _produce(self, partition: int, item: Produced) -> None:
        producer = self.producers[partition]
        produced = self.produced.get(partition)
        if produced is None:
            try:
                producer.begin_transaction()
            except KafkaException as e:
                self._raise(partition, "begin a transaction", e)
            produced = self.produced[partition] = []
        produced.append(item)
        try:
            produce(producer, *item)
        except (KafkaException, SystemError) as e:  # fatal: fenced, or the producer unusable
            if isinstance(e, SystemError) and _kafka_error(e) is None:
                raise
            self._raise(partition, "send", e)

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None:
        """Produce into the transaction of the input partition being processed (`select`)."""
        self._produce(self.current, (topic, key, value, headers, partition, None))

    def send_changelog(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        """Produce a run-state write to changelog `partition`, in input partition `partition`'s
        transaction (the changelog has one partition per input partition)."""
        self._produce(partition, (topic, key, value, None, partition, self._changelog_delivered))

    def _changelog_delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            partition, offset = msg.partition(), msg.offset()
            if partition is not None and offset is not None:
                with self._acked:
                    if offset > self._changelog_acked.get(partition, -1):
                        self._changelog_acked[partition] = offset

    # ------------------------------------------------------------------ the commit

    def commit(self, offsets: dict[int, int]) -> dict[int, int]:
        """Commit each partition's transaction with its input offset (`offsets`: the next offset to
        read of each input partition to commit). Blocking; the partitions in parallel.

        Returns, per changelog partition written, the next offset after its last committed write.
        Raises ProducerFenced or DeliveryError; then nothing of a failed partition is committed.
        """
        partitions = sorted(set(self.produced) | set(offsets))
        if not partitions:
            return {}
        with self._acked:
            self._changelog_acked.clear()
        if len(partitions) == 1:
            self._commit_one(partitions[0], offsets.get(partitions[0]))
        else:
            with ThreadPoolExecutor(max_workers=min(8, len(partitions))) as pool:
                for done in [pool.submit(self._commit_one, p, offsets.get(p)) for p in partitions]:
                    done.result()
        with self._acked:
            acked, self._changelog_acked = self._changelog_acked, {}
        return {partition: offset + 1 for partition, offset in acked.items()}

    def _commit_one(self, partition: int, offset: int | None) -> None:
        producer = self.producers[partition]
        for attempt in range(1, ATTEMPTS + 1):
            try:
                if partition not in self.produced:
                    producer.begin_transaction()
                    self.produced[partition] = []
                producer.flush(CALL_TIMEOUT_SECONDS)
                if offset is not None:
                    self._retrying(
                        partition, "send its offset", partial(self._send_offsets, producer, partition, offset)
                    )
                self._retrying(
                    partition,
                    "commit its transaction",
                    partial(producer.commit_transaction, CALL_TIMEOUT_SECONDS),
                )
                self.produced.pop(partition, None)
                return
            except CallStuck as e:
                if attempt == ATTEMPTS:
                    raise
                log.warning(
                    "input partition %d: %s; replacing its producer (which fences the stuck one and "
                    "aborts its transaction) and sending its %d messages again (attempt %d of %d)",
                    partition,
                    e,
                    len(self.produced.get(partition, ())),
                    attempt + 1,
                    ATTEMPTS,
                )
                producer = self._replace_stuck(partition, producer)
            except SystemError as e:  # a delivery callback ran while flush()'s exception was pending
                if _kafka_error(e) is None:
                    raise
                self._raise(partition, "commit its transaction", e)
            except KafkaException as e:
                error = e.args[0]
                if _fenced(error) or not error.txn_requires_abort() or attempt == ATTEMPTS:
                    self._raise(partition, "commit its transaction", e)
                log.warning(
                    "input partition %d: the transaction failed (%s): aborting it and sending its %d "
                    "messages again (attempt %d of %d)",
                    partition,
                    error,
                    len(self.produced.get(partition, ())),
                    attempt + 1,
                    ATTEMPTS,
                )
                self._abort_and_resend(partition, producer)

    def _retrying(self, partition: int, what: str, call: Callable[[], None]) -> None:
        """`call()`, made again while librdkafka answers that it may be (a broker away: a transport
        failure, a coordinator moving), for up to `CALL_TIMEOUT_SECONDS`; any other error is raised."""
        deadline = time.monotonic() + CALL_TIMEOUT_SECONDS
        while True:
            try:
                call()
                return
            except KafkaException as e:
                error = _kafka_error(e)
                if error is None or not error.retriable() or error.txn_requires_abort() or error.fatal():
                    raise
                if time.monotonic() >= deadline:
                    raise
                log.info("input partition %d: cannot %s yet (%s); asking again", partition, what, error)
            time.sleep(RETRY_PAUSE_SECONDS)

    def _send_offsets(self, producer: Producer, partition: int, offset: int) -> None:
        """`send_offsets_to_transaction`, on a thread of its own, waited for a bounded time."""
        answer: Future[None] = Future()

        def call() -> None:
            try:
                producer.send_offsets_to_transaction(
                    [TopicPartition(self.input_topic, partition, offset)],
                    self.group_metadata(),
                    SEND_OFFSETS_TIMEOUT_SECONDS,
                )
            except Exception as e:  # handed to the waiting caller, which raises it
                answer.set_exception(e)
            else:
                answer.set_result(None)

        threading.Thread(target=call, name=f"olstream-send-offsets-{partition}", daemon=True).start()
        try:
            answer.result(SEND_OFFSETS_TIMEOUT_SECONDS + STUCK_MARGIN_SECONDS)
        except FuturesTimeout:
            raise CallStuck(
                f"sending the offset of input partition {partition} to its transaction still blocks "
                f"{SEND_OFFSETS_TIMEOUT_SECONDS + STUCK_MARGIN_SECONDS:.0f} s after the call"
            ) from None

    def _replace_stuck(self, partition: int, stuck: Producer) -> Producer:
        """A new, initialised producer for `partition` in place of `stuck` (which it fences, its
        transaction aborted), with the partition's messages sent again in a new transaction."""
        self.stuck.append(stuck)  # never closed or dropped: a thread still waits in one of its calls
        self.fatal.pop(partition, None)  # the stuck producer's, if any
        producer = self.producers[partition] = self._new_producer(partition)
        try:
            producer.begin_transaction()
        except KafkaException as e:
            self._raise(partition, "begin a transaction", e)
        for item in self.produced.get(partition, ()):
            produce(producer, *item)
        return producer

    def _abort_and_resend(self, partition: int, producer: Producer) -> None:
        try:
            producer.abort_transaction(CALL_TIMEOUT_SECONDS)
            producer.begin_transaction()
        except KafkaException as e:
            self._raise(partition, "abort its transaction", e)
        for item in self.produced.get(partition, ()):
            produce(producer, *item)

    def _raise(self, partition: int, what: str, e: Exception) -> NoReturn:
        """Raise ProducerFenced or DeliveryError for a failed call of `partition`'s producer."""
        error = _kafka_error(e)
        if error is not None and error.code() == KafkaError._FATAL and partition not in self.fatal:
            producer = self.producers.get(partition)
            try:  # the fatal error itself waits as an event: a poll raises it
                if producer is not None:
                    producer.poll(0)
            except KafkaException as cause:
                error = cause.args[0]
        if error is not None and error.fatal() and error.code() != KafkaError._FATAL:
            self.fatal.setdefault(partition, error)
        if partition in self.fatal and (error is None or error.code() == KafkaError._FATAL):
            error = self.fatal[partition]  # the cause: a producer in a fatal state answers only _FATAL
        tid = transactional_id(self.app_id, self.input_topic, partition)
        if error is not None and _fenced(error):
            raise ProducerFenced(
                f"input partition {partition}: another worker took transactional id {tid!r} (this "
                f"worker was dropped from the group): cannot {what}: {error}"
            ) from e
        raise DeliveryError(f"input partition {partition} ({tid}): cannot {what}: {error or e}") from e


def _kafka_error(e: BaseException | None) -> KafkaError | None:
    """The KafkaError of a KafkaException, or of the one a SystemError was raised over (confluent-kafka
    raises SystemError when a callback runs while a call's KafkaException is pending)."""
    while e is not None:
        if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
            return e.args[0]
        e = e.__cause__ or e.__context__
    return None
