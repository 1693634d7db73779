"""Each topic default and header name is defined once in code, and docs/contract.md names each one."""

from __future__ import annotations

from olstream.contract import topics, wire
from olstream.shared import deadletter
from tests.support.paths import REPO

HEADERS = (
    *wire.RECORD_HEADERS,
    *wire.EVENT_HEADERS,
    deadletter.ERROR,
    deadletter.ERROR_DETAIL,
    deadletter.SOURCE_TOPIC,
    deadletter.SOURCE_PARTITION,
    deadletter.SOURCE_OFFSET,
    deadletter.HTTP_STATUS,
    deadletter.HTTP_RESPONSE,
)
TOPICS = (
    topics.EVENTLOG,
    topics.errors_topic_of(topics.EVENTLOG),
    topics.offsets_topic_of(topics.EVENTLOG),
    topics.RUN_EVENTS,
    topics.STREAM_ERRORS,
    topics.SINK_DLQ,
)


def test_header_names_are_distinct_and_in_the_olstream_namespace() -> None:
    assert len(set(HEADERS)) == len(HEADERS)
    assert all(h.startswith("olstream.") for h in HEADERS)


def test_the_pipeline_topics_are_the_defaults_source_to_sink() -> None:
    assert (TOPICS[0], TOPICS[1], topics.RUN_EVENTS, topics.STREAM_ERRORS, topics.SINK_DLQ) == topics.PIPELINE


def test_the_contract_page_names_every_header_and_topic() -> None:
    page = (REPO / "docs" / "contract.md").read_text(encoding="utf-8")
    missing = [name for name in (*HEADERS, *TOPICS) if f"`{name}`" not in page]
    assert missing == [], f"docs/contract.md does not name {missing}"


def test_the_key_of_a_log_partition_is_its_decimal_id() -> None:
    assert wire.message_key(0) == b"0" and wire.message_key(17) == b"17"
