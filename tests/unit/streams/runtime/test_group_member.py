"""The group metadata the worker builds for faust's member (KIP-447), checked against confluent-kafka's
own at start; a member that is none at the moment sends no offsets."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from olstream.shared.errors import ConfigError
from olstream.streams.runtime import group_member
from olstream.streams.runtime.group_member import GroupMember, check_metadata_format, metadata_bytes
from olstream.streams.runtime.transaction_errors import GenerationFenced


def _never_subscribed(group: str) -> bytes:
    # no broker is asked: a consumer's metadata before it joins anything
    metadata = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": group}).consumer_group_metadata()
    assert isinstance(metadata, bytes)
    return metadata


def test_the_bytes_built_for_no_member_equal_the_installed_confluent_kafkas() -> None:
    assert metadata_bytes("olstream-stream", -1, "") == _never_subscribed("olstream-stream")
    check_metadata_format("olstream-stream", _never_subscribed("olstream-stream"))


def test_a_member_s_generation_and_id_go_into_the_bytes() -> None:
    built = metadata_bytes("g", 3, "aiokafka-0.14.0-abc")
    assert built == b"CGMDv2:\x03\x00\x00\x00g\x00aiokafka-0.14.0-abc\x00\x01"


def test_an_altered_format_is_refused_naming_the_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_member, "MAGIC", b"CGMDv3:")
    with pytest.raises(ConfigError, match=r"confluent-kafka \S+, librdkafka \S+") as refused:
        check_metadata_format("g", _never_subscribed("g"))
    assert "at_least_once" in str(refused.value)


@pytest.mark.parametrize("member", [(-1, ""), (-1, "aiokafka-1"), (4, "")])
def test_a_member_that_is_none_now_sends_no_offsets(member: tuple[int, str]) -> None:
    """(-1, "") is what aiokafka resets to when the coordinator no longer knows the member, and what
    the broker accepts unchecked: it must never be sent."""
    with pytest.raises(GenerationFenced, match="no member of group 'g'"):
        GroupMember("g", lambda: member).metadata()


def test_a_current_member_s_metadata() -> None:
    assert GroupMember("g", lambda: (7, "m-1")).metadata() == metadata_bytes("g", 7, "m-1")
