"""Every private name of faust-streaming the worker's runtime relies on, in one place.

The worker commits its input itself: faust reads the input topic for it (declared with faust's
public ``acks=False``, so faust tracks no acks, gaps or commits for it), and the worker's checkpoint
(``olstream.streams.runtime.checkpoint``) commits the processed prefix of each input partition.
What no public API of faust 0.15 serves is reached through this module only, each entry of
:data:`ALL_NAMES` saying why. The runtime overrides no faust method and subclasses no faust class.

:func:`missing_private_names` checks every declared name against the installed faust-streaming,
``tests/unit/streams/runtime/test_faust_private.py`` fails naming each one a faust upgrade removed,
and :func:`check_faust_private_names` is the same check for a worker's start. Importing this module
needs no private name: each is looked up when used, so the check can report it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from faust.types import TP
from faust.types.transports import ConsumerT

from olstream.shared.errors import ConfigError


class PrivateName(NamedTuple):
    """A name of faust the runtime relies on: `qualname` (``Class.attr`` or ``attr``) of `module`."""

    module: str
    qualname: str
    instance: bool = False  # an attribute faust's __init__ sets (declared by an annotation on the class)

    def __str__(self) -> str:
        return f"{self.module}.{self.qualname}"


_CONSUMER = "faust.transport.consumer"  # faust's base consumer and its thread-delegating subclass

ALL_NAMES: tuple[PrivateName, ...] = (
    # commit given offsets of the group's consumer (on faust's consumer thread, where aiokafka's
    # consumer lives): faust's public Consumer.commit commits only its own ack bookkeeping, which
    # acks=False leaves empty for the input (commit_offsets). Only under at_least_once: under
    # exactly_once the input offsets are committed in each partition's transaction
    PrivateName(_CONSUMER, "ThreadDelegateConsumer._commit"),
    # faust's read offsets: its fetch loop drops a fetched record below its partition's read offset,
    # and writes a read offset back after delivering a record even when the partition was revoked and
    # sought meanwhile, which dropped a new owner's records. For the input topic the worker's own
    # ledger decides what is taken, so the mapping keeps none for it (keep_no_read_offsets)
    PrivateName(_CONSUMER, "Consumer._read_offset", instance=True),
    # seek on faust's consumer thread (where aiokafka's consumer lives) and wait until aiokafka's
    # position is there: faust's public Consumer.seek calls aiokafka's seek from the event loop's
    # thread, racing the consumer thread's fetcher (seek_wait). Not underscored, but no part of
    # faust's ConsumerT interface: only its thread-delegating consumer has it
    PrivateName(_CONSUMER, "ThreadDelegateConsumer.seek_wait"),
    # mode's SIGUSR1 handler (it prints every thread and task): StreamWorkerProcess (app.py) overrides
    # it to log where the worker reads each input partition first; mode has no public hook for it
    PrivateName("mode.worker", "Worker._on_sigusr1"),
)

# ---------------------------------------------------------------------- the names, as the runtime uses them


async def commit_offsets(consumer: ConsumerT, offsets: Mapping[TP, int]) -> bool:
    """Commit `offsets` (the next offset to read of each partition) for the consumer's group; False
    when faust's consumer did not (a rebalance took the partitions: their next owner reads again)."""
    return bool(await consumer._commit(offsets))  # type: ignore[attr-defined]


class ReadOffsetsWithoutInput(dict[Any, int | None]):
    """faust's read offsets, never any for one topic (faust's fetch loop then drops none of its records)."""

    def __init__(self, topic: str) -> None:
        super().__init__()
        self._topic = topic

    def __missing__(self, key: Any) -> None:
        return None

    def __getitem__(self, key: Any) -> int | None:
        if key.topic == self._topic:
            return None
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: int | None) -> None:
        if key.topic != self._topic:
            super().__setitem__(key, value)


async def seek_wait(consumer: ConsumerT, offsets: Mapping[TP, int]) -> None:
    """Seek partitions on faust's consumer thread and wait until the seeks are done (raises aiokafka's
    IllegalStateError for a partition no longer assigned)."""
    await consumer.seek_wait(offsets)


def keep_no_read_offsets(consumer: ConsumerT, topic: str) -> None:
    """Give the consumer read offsets that keep none for `topic` (before its fetch loop starts)."""
    consumer._read_offset = ReadOffsetsWithoutInput(topic)  # type: ignore[attr-defined]


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
