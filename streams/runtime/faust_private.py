"""Every private name of faust-streaming the worker's runtime relies on, in one place.

The worker keeps its own ledger per assigned input partition (``olstream.streams.input_ledger``)
because faust's read-offset and gap bookkeeping goes stale around rebalances; replacing that
bookkeeping for the input topic, and processing records in batches outside faust's own
stream loop, needs names that are not faust's public API (underscored attributes, internal
modules and classes). The runtime (``agent.py``, ``consumer.py``, ``app.py``) reaches each of
them through this module only; each is declared in :data:`USED` or :data:`OVERRIDDEN`, with
why olstream needs it.

Overrides of faust's methods stay in their subclass (``WorkerConsumer``, ``WorkerTransport`` in
``consumer.py``): :data:`OVERRIDDEN` names them with the faust class they override.

:func:`missing_private_names` checks every declared name against the installed faust-streaming
(the runtime uses no private name of aiokafka directly: it reaches aiokafka through faust's driver),
``tests/unit/streams/runtime/test_faust_private.py`` fails naming each one a faust upgrade removed,
and :func:`check_faust_private_names` is the same check for a worker's start. Importing this module
needs only faust's aiokafka driver module and its ``Consumer`` and ``Transport`` classes (the
runtime's classes extend them); every other name is looked up when used, so the check can report it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import weakref
from collections.abc import Iterable, Mapping, MutableMapping
from contextlib import AbstractContextManager
from contextvars import Token
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import faust.streams
import faust.types.tuples
from faust.transport.drivers import aiokafka as _aiokafka_driver
from faust.types import TP, EventT
from faust.types.transports import ConsumerT
from mode.utils.futures import notify

from olstream.shared.errors import ConfigError

if TYPE_CHECKING:
    from faust.transport.consumer import Consumer as _FaustConsumer


class PrivateName(NamedTuple):
    """A name of faust the runtime relies on: `qualname` (``Class.attr`` or ``attr``) of `module`."""

    module: str
    qualname: str
    instance: bool = False  # an attribute faust's __init__ sets (declared by an annotation on the class)
    overridden_by: str = ""  # the olstream class that overrides it (OVERRIDDEN only)

    def __str__(self) -> str:
        return f"{self.module}.{self.qualname}"


_CONSUMER = "faust.transport.consumer"  # faust's base consumer and its thread-delegating subclass
_DRIVER = "faust.transport.drivers.aiokafka"  # faust's aiokafka driver

USED: tuple[PrivateName, ...] = (
    # the aiokafka driver's consumer and transport: WorkerConsumer and WorkerTransport extend them, as
    # faust offers no other way to put the worker's own commit bookkeeping into its consumer
    PrivateName(_DRIVER, "Consumer"),
    PrivateName(_DRIVER, "Transport"),
    # the context variable holding the event being processed: faust routes a table read or write to
    # that event's partition (RocksDB partition DB and changelog partition). The agent processes
    # records in batches and writes a batch's state after its sends were acknowledged, each change
    # under the event that made it, so it sets the variable itself (set_current_event)
    PrivateName("faust.streams", "_current_event"),
    # the RocksDB store's raw get: one read of raw bytes in the current event's partition per lookup
    # (Table.get would check membership first, a second read); also tells whether a finished run
    # to evict is still stored (raw_get)
    PrivateName("faust.stores.rocksdb", "Store._get"),
    # the lock faust's Consumer.ack and Message.ack hold for the acked test-and-set and the
    # consumer's ack bookkeeping: WorkerConsumer.ack does that bookkeeping itself, under the same lock
    PrivateName("faust.types.tuples", "ack_lock"),
    # faust's read offsets: it drops a fetched record below its read offset as already read and counts
    # the offsets between two fetched records as a gap to commit over; read offsets written back after
    # a revocation dropped a new owner's records. WorkerConsumer replaces the mapping with one that
    # never keeps any for the input topic (the ledger does that job) (replace_read_offsets)
    PrivateName(_CONSUMER, "Consumer._read_offset", instance=True),
    # the records taken and not yet acked, which a rebalance waits for (stream_wait_empty): an input
    # record the agent acked, or one faust's stream dropped, leaves it (forget_unacked); an input
    # partition with none of its records in it has nothing on the way to the agent (unacked_partitions)
    PrivateName(_CONSUMER, "Consumer._unacked_messages", instance=True),
    # acks counted towards broker_commit_every: the agent's acks on the input count as faust's do (count_ack)
    PrivateName(_CONSUMER, "Consumer._n_acked", instance=True),
    # the future wait_empty arms for the next ack: an agent's ack wakes it as faust's ack does (count_ack)
    PrivateName(_CONSUMER, "Consumer._waiting_for_ack", instance=True),
    # seek on faust's consumer thread (where aiokafka's consumer lives) and wait until aiokafka's
    # position is there: an input partition is read again from a hole, and one the group never
    # committed is sought to its earliest offset (aiokafka leaves it where its fetcher stopped) (seek_wait)
    PrivateName(_CONSUMER, "ThreadDelegateConsumer.seek_wait"),
    # the earliest offsets of input partitions the group never committed, asked on faust's consumer
    # thread (earliest_offsets)
    PrivateName(_CONSUMER, "ThreadDelegateConsumer.earliest_offsets"),
)

_WORKER_CONSUMER = "olstream.streams.runtime.consumer.WorkerConsumer"
_WORKER_TRANSPORT = "olstream.streams.runtime.consumer.WorkerTransport"

OVERRIDDEN: tuple[PrivateName, ...] = (
    # the partitions faust's commit considers: faust's lists only those with acks in its own
    # bookkeeping; WorkerConsumer adds every input partition that has a ledger
    PrivateName(_CONSUMER, "Consumer._filter_tps_with_pending_acks", overridden_by=_WORKER_CONSUMER),
    # a partition's next offset to commit: faust's is its acked offsets plus the gaps it believes it
    # saw; for the input topic WorkerConsumer's is its ledger's (acked or absent offsets, in order)
    PrivateName(_CONSUMER, "Consumer._new_offset", overridden_by=_WORKER_CONSUMER),
    # faust records the offsets between two fetched records as a gap to commit over; on the input
    # topic WorkerConsumer records none (what lies between is the ledger's business)
    PrivateName(_CONSUMER, "Consumer._add_gap", overridden_by=_WORKER_CONSUMER),
    # faust's consumer seeks every assigned partition to its committed offset here (on each
    # assignment); WorkerConsumer restarts each input partition's ledger at that offset
    PrivateName(_CONSUMER, "ThreadDelegateConsumer.seek_to_committed", overridden_by=_WORKER_CONSUMER),
    # ConsumerT methods, listed as the ledger depends on them: an ack on the input topic marks an
    # offset only when it is the agent's (faust's stream also acks records it drops), and a
    # rebalance drops the ledgers of partitions no longer assigned
    PrivateName(_CONSUMER, "Consumer.ack", overridden_by=_WORKER_CONSUMER),
    PrivateName(_CONSUMER, "Consumer.on_partitions_revoked", overridden_by=_WORKER_CONSUMER),
    PrivateName(_CONSUMER, "Consumer.on_partitions_assigned", overridden_by=_WORKER_CONSUMER),
    # the consumer class the aiokafka transport creates: WorkerTransport's is WorkerConsumer
    PrivateName(_DRIVER, "Transport.Consumer", overridden_by=_WORKER_TRANSPORT),
)

ALL_NAMES: tuple[PrivateName, ...] = USED + OVERRIDDEN

# ---------------------------------------------------------------------- the names, as the runtime uses them

AiokafkaConsumer = _aiokafka_driver.Consumer
AiokafkaTransport = _aiokafka_driver.Transport


def set_current_event(event: EventT[Any] | None) -> Token[weakref.ReferenceType[EventT[Any]] | None]:
    """Make `event` the current event of this task's context (None: no current event), as faust's
    stream does before it hands an event over; the token resets it (reset_current_event).

    The table routes reads and writes by it (store DB and changelog partition). Only this task's
    context is touched, never the stream attribute that take_events' buffer task reads."""
    return faust.streams._current_event.set(None if event is None else weakref.ref(event))


def reset_current_event(token: Token[weakref.ReferenceType[EventT[Any]] | None]) -> None:
    faust.streams._current_event.reset(token)


def raw_get(store: Any, key: bytes) -> bytes | None:
    """The raw value of `key` in the current event's partition of a table's RocksDB store (``table.data``)."""
    raw: bytes | None = store._get(key)
    return raw


def ack_lock() -> AbstractContextManager[bool]:
    """The lock faust holds while it marks a message acked and updates the consumer's ack bookkeeping."""
    return faust.types.tuples.ack_lock


def replace_read_offsets(consumer: ConsumerT, read_offsets: MutableMapping[TP, int | None]) -> None:
    """Give the consumer the mapping faust keeps its read offsets in."""
    cast("_FaustConsumer", consumer)._read_offset = read_offsets


def forget_unacked(consumer: ConsumerT, message: Any) -> None:
    """The message is no longer one a rebalance waits for."""
    cast("_FaustConsumer", consumer)._unacked_messages.discard(message)


def unacked_partitions(consumer: ConsumerT, topic: str) -> set[int]:
    """The partitions of `topic` with records taken from the consumer and not yet acked."""
    messages = list(cast("_FaustConsumer", consumer)._unacked_messages)  # a WeakSet: copied first
    return {message.tp.partition for message in messages if message.tp.topic == topic}


def count_ack(consumer: ConsumerT) -> None:
    """Count an ack towards broker_commit_every and wake whoever waits for the next ack, as faust's ack."""
    faust_consumer = cast("_FaustConsumer", consumer)
    faust_consumer._n_acked += 1
    notify(faust_consumer._waiting_for_ack)


async def seek_wait(consumer: ConsumerT, offsets: Mapping[TP, int]) -> None:
    """Seek partitions on faust's consumer thread and wait until the seeks are done (raises aiokafka's
    IllegalStateError for a partition no longer assigned)."""
    await consumer.seek_wait(offsets)


async def earliest_offsets(consumer: ConsumerT, *tps: TP) -> Mapping[TP, int]:
    """The earliest offsets of the partitions, asked on faust's consumer thread."""
    return await consumer.earliest_offsets(*tps)


# ---------------------------------------------------------------------- the check

_ABSENT = object()


def _exists(name: PrivateName) -> bool:
    try:
        owner: Any = importlib.import_module(name.module)
    except ImportError:
        return False
    *path, attribute = name.qualname.split(".")
    for part in path:
        owner = getattr(owner, part, _ABSENT)
        if owner is _ABSENT:
            return False
    if hasattr(owner, attribute):
        return True
    # an attribute faust's __init__ sets: faust declares each on its class, by an annotation
    return (
        name.instance
        and isinstance(owner, type)
        and any(attribute in vars(klass).get("__annotations__", {}) for klass in owner.__mro__)
    )


def missing_private_names(names: Iterable[PrivateName] = ALL_NAMES) -> list[str]:
    """The declared names (module attributes, class attributes and methods) the installed faust lacks."""
    return [str(name) for name in names if not _exists(name)]


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def check_faust_private_names() -> None:
    """Refuse to start a worker on a faust-streaming that lacks a private name the worker relies on."""
    missing = missing_private_names()
    if missing:
        raise ConfigError(
            f"the installed faust-streaming {_version('faust-streaming')} (aiokafka {_version('aiokafka')}) "
            "lacks private names the worker relies on: "
            + ", ".join(missing)
            + "; install the faust-streaming line pyproject.toml pins (see "
            "olstream/streams/runtime/faust_private.py)"
        )
