"""The group metadata of faust's own member, as a confluent-kafka transactional producer takes it.

``send_offsets_to_transaction`` fences a zombie by the group's generation only when it is given
the real member's generation and member id (KIP-447). faust's member is an aiokafka consumer, and
confluent-kafka has no public constructor for its ``ConsumerGroupMetadata``; what
``Consumer.consumer_group_metadata()`` returns, and what the producer takes back, is librdkafka's
own serialisation, plain bytes::

    b"CGMDv2:" + generation (little-endian int32) + group id + b"\\0" + member id + b"\\0" + b"\\x01"

(the last byte: no group instance id). It is no documented API, so `check_metadata_format` holds
the bytes built here for (generation -1, no member) against a never-subscribed consumer's own at
the worker's start, and refuses to start (exit ``CONFIG``) when they differ.

A member that is none at the moment (aiokafka resets its generation to -1 and its member id to ""
when the coordinator no longer knows it) must never send offsets: the broker skips the generation
check for exactly that pair. `GroupMember.metadata` raises `GenerationFenced` instead.
"""

from __future__ import annotations

import importlib.metadata
import struct
from collections.abc import Callable

from olstream.shared.errors import ConfigError
from olstream.streams.runtime.transaction_errors import GenerationFenced

MAGIC = b"CGMDv2:"
NO_GENERATION = -1


def metadata_bytes(group_id: str, generation: int, member_id: str) -> bytes:
    """librdkafka's serialised ``ConsumerGroupMetadata`` of `member_id` in `generation` of `group_id`."""
    return (
        MAGIC
        + struct.pack("<i", generation)
        + group_id.encode()
        + b"\0"
        + member_id.encode()
        + b"\0"
        + b"\x01"
    )


def _versions() -> str:
    from confluent_kafka import libversion, version

    return f"confluent-kafka {version()[0]}, librdkafka {libversion()[0]}"


def check_metadata_format(group_id: str, never_subscribed: bytes) -> None:
    """Raise ConfigError unless the bytes built for (-1, no member) equal `never_subscribed`, a
    never-subscribed confluent-kafka consumer's ``consumer_group_metadata()`` of `group_id`."""
    built = metadata_bytes(group_id, NO_GENERATION, "")
    if never_subscribed != built:
        raise ConfigError(
            f"this confluent-kafka's group metadata is not the format the worker builds for "
            f"exactly_once ({_versions()}: {never_subscribed!r}, expected {built!r}); install a "
            f"tested version (pyproject.toml: confluent-kafka "
            f"{_tested_range()}) or run --processing-guarantee at_least_once"
        )


def _tested_range() -> str:
    try:
        requires = importlib.metadata.requires("olstream") or []
    except importlib.metadata.PackageNotFoundError:
        return "(see pyproject.toml)"
    for requirement in requires:
        if requirement.startswith("confluent-kafka") and "extra" not in requirement:
            return requirement.removeprefix("confluent-kafka")
    return "(see pyproject.toml)"


class GroupMember:
    """The metadata of faust's member now: `member()` answers its (generation, member id)."""

    def __init__(self, group_id: str, member: Callable[[], tuple[int, str]]) -> None:
        self.group_id = group_id
        self.member = member

    def metadata(self) -> bytes:
        generation, member_id = self.member()
        if generation < 0 or not member_id:
            raise GenerationFenced(
                f"faust's consumer is no member of group {self.group_id!r} now (generation "
                f"{generation}, member id {member_id!r}): the group dropped it, and no offsets are "
                "sent until a rebalance gives it partitions again"
            )
        return metadata_bytes(self.group_id, generation, member_id)
