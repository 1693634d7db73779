"""`--processing-guarantee exactly_once`: one transactional producer per worker, one transaction per
checkpoint, fenced by the group's generation (KIP-447, Kafka Streams' exactly-once v2).

The worker has one transactional producer for its whole life, kept across rebalances. Everything a
batch produces goes into the one open transaction: the RunEvents, the error records and the
run-state changelog writes of every owned input partition. The checkpoint adds the input offsets
of every owned partition (``send_offsets_to_transaction``, with the group metadata of faust's own
member: its current generation and member id, ``group_member``) and commits.

**Fenced by the generation.** The broker refuses the offsets of a member whose generation is not
the group's current one (``ILLEGAL_GENERATION``) or who is no member (``UNKNOWN_MEMBER_ID``). A
worker the group dropped while it was paused (a GC pause, CPU throttling, a VM migration) can
never commit once the group gave its partitions to another: its transaction is aborted, and a
read_committed reader never sees it (`GenerationFenced`). A partition's next owner reads the
committed offsets as stable ones (the broker answers only once no transaction holding offsets of
the partition is open) before it restores the partition's run states, so whatever the previous
owner committed is in both, and nothing it did not commit is in either
(``olstream.streams.runtime.agent``).

**Fenced by the epoch.** The transactional id is the worker's own, kept in its data dir
(``olstream.streams.runtime.worker_identity``): a worker restarted on its data dir initialises the
same id, which aborts its previous incarnation's open transaction at once. The broker also aborts
a transaction open longer than `transaction_timeout` (a worker killed and not restarted, paused, or
blocked while a broker was away), which fences the producer for good (`ProducerFenced`, fatal):
`recover` puts a new one of the same id in its place.

**Errors.** A fence drops the batch (``olstream.streams.runtime.member_gate``), and so does a send
that finds the open transaction failed (`TransactionFailed`: librdkafka refuses every send until
it is aborted). At the commit, an abortable error (a broker failing over, a send that failed)
aborts the transaction and sends its messages again in a new one, up to `ATTEMPTS` times; then, or
on any other error, `DeliveryError` (exit ``SEND_FAILED``).

**A call that never returns.** librdkafka's ``send_offsets_to_transaction`` can block past its
timeout, for good, when the broker of the group's coordinator died (librdkafka issues 5456 and
5511, open in 2.16). It runs on a thread of its own, waited for `SEND_OFFSETS_TIMEOUT_SECONDS` plus
a margin; a call still blocked by then leaves its producer behind for a new one of the same id,
whose initialisation fences the old one and aborts its transaction, and the batch's messages are
sent again in the new one. The one left behind is closed once its call returns; at most one is
kept (a second stuck call ends the process), and ``olstream_stream_producers_replaced_total``
counts the replacements.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FuturesTimeout
from typing import Any, NoReturn

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from olstream.shared.errors import DeliveryError
from olstream.shared.kafka_clients import Kafka, producer_config
from olstream.shared.produce import produce
from olstream.streams.runtime.metrics import PRODUCERS_REPLACED
from olstream.streams.runtime.sender import Headers
from olstream.streams.runtime.transaction_errors import (
    CallStuck,
    GenerationFenced,
    ProducerFenced,
    TransactionFailed,
    fenced,
    generation_refused,
    kafka_error,
)

log = logging.getLogger(__name__)

ATTEMPTS = 3  # transactions of one batch before the worker gives up (SEND_FAILED)
CALL_TIMEOUT_SECONDS = 60.0  # init, commit, abort
# sending a batch's input offsets, each call (it takes milliseconds; a call that times out is made
# again): short, because a call stuck past it is only found after it, while the output stands still
SEND_OFFSETS_TIMEOUT_SECONDS = 5.0
STUCK_MARGIN_SECONDS = 2.0  # past its own timeout, a call is taken as never returning
RETRY_PAUSE_SECONDS = 0.5  # between calls of a transaction step that librdkafka says may be retried

# topic, key, value, headers, partition, on_delivery: one produce of the open transaction
Produced = tuple[str, bytes | None, bytes | None, Headers | None, int | None, Any]


class WorkerTransactions:
    """The worker's transactional producer, its open transaction, and the transaction's commit.

    `send` and `send_changelog` produce into the open transaction (begun by the first of them);
    `commit` sends the input offsets and commits (blocking: run it on a thread). `group_metadata`
    answers the metadata of faust's member now, or raises `GenerationFenced` when it is none.
    """

    def __init__(
        self,
        kafka: Kafka,
        transactional_id: str,
        input_topic: str,
        group_metadata: Callable[[], bytes],
        transaction_timeout: float,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.kafka = kafka
        self.transactional_id = transactional_id
        self.input_topic = input_topic
        self.group_metadata = group_metadata
        self.transaction_timeout = transaction_timeout
        self.extra = extra or {}
        self.producer: Producer | None = None
        self.produced: list[Produced] | None = None  # the open transaction's produces; None: none open
        self._lock = threading.Lock()
        self._changelog_acked: dict[int, int] = {}  # changelog partition -> highest acknowledged offset
        # the producer's first fatal error: later calls of a producer in a fatal state answer only
        # _FATAL ("Unable to produce message: Local: Fatal error")
        self.fatal: KafkaError | None = None
        self.stuck: Producer | None = None  # replaced while a call of its still blocked

    # ------------------------------------------------------------------ the producer

    def _new_producer(self) -> Producer:
        config = producer_config(
            self.kafka,
            {
                "transactional.id": self.transactional_id,
                "transaction.timeout.ms": int(self.transaction_timeout * 1000),
                # the checkpoint's flush() sends at once whatever the linger (librdkafka), and nothing
                # is visible before the commit: a long linger only makes fewer, fuller produce requests
                # (at 5 ms the broker's CPU under exactly_once was 1.4-1.9x at_least_once's, at 50 ms
                # 1.1-1.4x: docs/benchmarks.md)
                "linger.ms": 50,
                "batch.num.messages": 10_000,
                "queue.buffering.max.messages": 500_000,
                "partitioner": "murmur2_random",
                **self.extra,
            },
        )
        producer = Producer(config)
        started = time.monotonic()
        try:
            # fences the previous incarnation's producer and aborts its open transaction
            producer.init_transactions(CALL_TIMEOUT_SECONDS)
        except KafkaException as e:
            raise DeliveryError(
                f"cannot initialise the worker's transactional producer ({self.transactional_id}): "
                f"{e.args[0]}; a Kafka-compatible service without transactions needs "
                "--processing-guarantee at_least_once, and with ACLs the worker needs Write and "
                "Describe on its transactional id"
            ) from e
        log.info(
            "transactional producer %s initialised in %.3f s (a previous incarnation's open "
            "transaction aborted)",
            self.transactional_id,
            time.monotonic() - started,
        )
        return producer

    def start(self) -> None:
        """The producer, initialised (blocking), unless it is already: it is kept across rebalances."""
        if self.producer is None:
            self.producer = self._new_producer()
            self.fatal = None

    def recover(self) -> None:
        """After a fence or a failed batch: no transaction open, and a usable producer (blocking). A
        producer in a fatal state is replaced by a new one of the same id."""
        produced, self.produced = self.produced, None
        if self.producer is None:
            return
        if self.fatal is not None:
            old, self.producer = self.producer, None
            log.info("replacing the transactional producer, fenced for good: %s", self.fatal)
            self._close(old)
            PRODUCERS_REPLACED.inc()
            self.start()
            return
        if produced is not None:
            try:
                self.producer.abort_transaction(CALL_TIMEOUT_SECONDS)
            except KafkaException as e:
                log.info("the open transaction is not aborted here (%s): replacing the producer", e.args[0])
                self.fatal = e.args[0]
                self.recover()

    def _close(self, producer: Producer) -> None:
        try:
            with warnings.catch_warnings():  # a fenced one's close cannot abort: said once, in the log
                warnings.simplefilter("ignore", RuntimeWarning)
                producer.close()
        except (KafkaException, RuntimeError) as e:  # fenced: nothing of it can land anyway
            log.debug("closing a transactional producer: %s", e)

    @property
    def open(self) -> bool:
        """Whether a transaction is open (something was sent since the last commit)."""
        return self.produced is not None

    # ------------------------------------------------------------------ sends

    def _produce(self, item: Produced) -> None:
        producer = self.producer
        assert producer is not None, "sending before the worker's producer was started"
        if self.produced is None:
            try:
                producer.begin_transaction()
            except KafkaException as e:
                self._raise_for_send("begin a transaction", e)
            self.produced = []
        self.produced.append(item)
        try:
            produce(producer, *item)
        except (KafkaException, SystemError) as e:  # fenced, the transaction failed, or unusable
            if isinstance(e, SystemError) and kafka_error(e) is None:
                raise
            self._raise_for_send("send", e)

    def _raise_for_send(self, what: str, e: Exception) -> NoReturn:
        """A send's failure: `TransactionFailed` when librdkafka refuses it until the transaction is
        aborted (its state is erroneous, or the error asks for the abort), else as `_raise` says."""
        error = kafka_error(e)
        if (
            error is not None
            and not error.fatal()
            and (error.code() == KafkaError._STATE or error.txn_requires_abort())
        ):
            raise TransactionFailed(
                f"{self.transactional_id}: the open transaction failed and must be aborted: cannot "
                f"{what}: {error}"
            ) from e
        self._raise(what, e)

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None:
        """Produce into the open transaction."""
        self._produce((topic, key, value, headers, partition, None))

    def send_changelog(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        """Produce a run-state write to changelog `partition`, in the open transaction."""
        self._produce((topic, key, value, None, partition, self._changelog_delivered))

    def _changelog_delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            partition, offset = msg.partition(), msg.offset()
            if partition is not None and offset is not None:
                with self._lock:
                    if offset > self._changelog_acked.get(partition, -1):
                        self._changelog_acked[partition] = offset

    # ------------------------------------------------------------------ the commit

    def commit(self, offsets: dict[int, int]) -> dict[int, int]:
        """Commit the open transaction with the input offsets (`offsets`: the next offset to read of
        each input partition to commit). Blocking.

        Returns, per changelog partition written, the next offset after its last committed write.
        Raises `Fenced` or DeliveryError; then nothing of the transaction is committed.
        """
        if self.produced is None and not offsets:
            return {}
        with self._lock:
            self._changelog_acked.clear()
        for attempt in range(1, ATTEMPTS + 1):
            try:
                self._commit_once(offsets)
                break
            except CallStuck as e:
                if attempt == ATTEMPTS:
                    raise
                log.warning(
                    "%s; replacing the producer (which fences the stuck one and aborts its "
                    "transaction) and sending the transaction's %d messages again (attempt %d of %d)",
                    e,
                    len(self.produced or ()),
                    attempt + 1,
                    ATTEMPTS,
                )
                self._replace_stuck()
            except SystemError as e:  # a delivery callback ran while flush()'s exception was pending
                if kafka_error(e) is None:
                    raise
                self._raise("commit the transaction", e)
            except KafkaException as e:
                error = e.args[0]
                if generation_refused(error):
                    self._raise("send the input offsets", e)
                if fenced(error) or not error.txn_requires_abort() or attempt == ATTEMPTS:
                    self._raise("commit the transaction", e)
                log.warning(
                    "the transaction failed (%s): aborting it and sending its %d messages again "
                    "(attempt %d of %d)",
                    error,
                    len(self.produced or ()),
                    attempt + 1,
                    ATTEMPTS,
                )
                self._abort_and_resend()
        self.produced = None
        with self._lock:
            acked, self._changelog_acked = self._changelog_acked, {}
        return {partition: offset + 1 for partition, offset in acked.items()}

    def _commit_once(self, offsets: dict[int, int]) -> None:
        producer = self.producer
        assert producer is not None
        if self.produced is None:
            producer.begin_transaction()
            self.produced = []
        producer.flush(CALL_TIMEOUT_SECONDS)
        if offsets:
            metadata = self.group_metadata()  # GenerationFenced when faust's consumer is no member now
            self._retrying("send the input offsets", lambda: self._send_offsets(producer, offsets, metadata))
        self._retrying("commit the transaction", lambda: producer.commit_transaction(CALL_TIMEOUT_SECONDS))

    def _retrying(self, what: str, call: Callable[[], None]) -> None:
        """`call()`, made again while librdkafka answers that it may be (a broker away: a transport
        failure, a coordinator moving), for up to `CALL_TIMEOUT_SECONDS`; any other error is raised."""
        deadline = time.monotonic() + CALL_TIMEOUT_SECONDS
        while True:
            try:
                call()
                return
            except KafkaException as e:
                error = kafka_error(e)
                if error is None or not error.retriable() or error.txn_requires_abort() or error.fatal():
                    raise
                if time.monotonic() >= deadline:
                    raise
                log.info("cannot %s yet (%s); asking again", what, error)
            time.sleep(RETRY_PAUSE_SECONDS)

    def _send_offsets(self, producer: Producer, offsets: dict[int, int], metadata: bytes) -> None:
        """`send_offsets_to_transaction`, on a thread of its own, waited for a bounded time."""
        answer: Future[None] = Future()
        tps = [TopicPartition(self.input_topic, p, o) for p, o in sorted(offsets.items())]

        def call() -> None:
            try:
                producer.send_offsets_to_transaction(tps, metadata, SEND_OFFSETS_TIMEOUT_SECONDS)
            except Exception as e:  # handed to the waiting caller, which raises it
                answer.set_exception(e)
            else:
                answer.set_result(None)
            finally:
                self._returned(producer)

        threading.Thread(target=call, name="olstream-send-offsets", daemon=True).start()
        try:
            answer.result(SEND_OFFSETS_TIMEOUT_SECONDS + STUCK_MARGIN_SECONDS)
        except FuturesTimeout:
            raise CallStuck(
                "sending the input offsets to the transaction still blocks "
                f"{SEND_OFFSETS_TIMEOUT_SECONDS + STUCK_MARGIN_SECONDS:.0f} s after the call"
            ) from None

    def _returned(self, producer: Producer) -> None:
        """A call of `producer` returned: close it if it was replaced meanwhile."""
        with self._lock:
            if self.stuck is not producer:
                return
            self.stuck = None
        log.info("a replaced producer's stuck call returned: the producer is closed")
        self._close(producer)

    def _replace_stuck(self) -> None:
        """A new, initialised producer in place of the stuck one (which it fences, its transaction
        aborted), with the transaction's messages sent again in a new transaction."""
        with self._lock:
            if self.stuck is not None:
                raise DeliveryError(
                    "a second replaced producer's call never returned: the worker ends instead of "
                    "keeping another one"
                )
            self.stuck = self.producer
        PRODUCERS_REPLACED.inc()
        self.fatal = None
        self.producer = None
        self.start()
        self._resend()

    def _abort_and_resend(self) -> None:
        assert self.producer is not None
        try:
            self.producer.abort_transaction(CALL_TIMEOUT_SECONDS)
        except KafkaException as e:
            self._raise("abort the transaction", e)
        self._resend()

    def _resend(self) -> None:
        assert self.producer is not None
        try:
            self.producer.begin_transaction()
        except KafkaException as e:
            self._raise("begin a transaction", e)
        for item in self.produced or ():
            produce(self.producer, *item)
        if self.produced is None:
            self.produced = []

    def _raise(self, what: str, e: Exception) -> NoReturn:
        """Raise GenerationFenced, ProducerFenced or DeliveryError for a failed call of the producer."""
        error = kafka_error(e)
        if error is not None and error.code() == KafkaError._FATAL and self.fatal is None:
            try:  # the fatal error itself waits as an event: a poll raises it
                if self.producer is not None:
                    self.producer.poll(0)
            except KafkaException as cause:
                error = cause.args[0]
        if error is not None and error.fatal() and error.code() != KafkaError._FATAL and self.fatal is None:
            self.fatal = error
        if self.fatal is not None and (error is None or error.code() == KafkaError._FATAL):
            error = self.fatal  # the cause: a producer in a fatal state answers only _FATAL
        if error is not None and generation_refused(error):
            raise GenerationFenced(
                f"the group refused this worker's input offsets (it is no member of the group's "
                f"current generation: the group dropped it): cannot {what}: {error}"
            ) from e
        if error is not None and fenced(error):
            raise ProducerFenced(
                f"transactional id {self.transactional_id!r} is fenced (the broker aborted a "
                f"transaction open past {self.transaction_timeout:.0f} s, or another process took "
                f"the id): cannot {what}: {error}"
            ) from e
        raise DeliveryError(f"{self.transactional_id}: cannot {what}: {error or e}") from e
