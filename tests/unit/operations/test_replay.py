"""`olstream replay`: its times, group, settings, range planning and bounded delivery, without Kafka."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from olstream.cli.main import main as olstream_main
from olstream.cli.replay import progress_bar
from olstream.connectors.sink.bounded import BoundedSink, Pace, ReplayProgress, Selection, event_type_of
from olstream.connectors.sink.bounds import (
    PartitionRange,
    ReplayBounds,
    TimeRange,
    decode_metadata,
    encode_metadata,
    plan_bounds,
)
from olstream.connectors.sink.delivery import DELIVERED, PendingEvent
from olstream.connectors.sink.settings import SinkSettings, build_settings
from olstream.connectors.sink.transports import ConsoleTransport
from olstream.contract import wire
from olstream.operations.replay import by_type
from olstream.operations.replay_settings import build_replay_settings, group_name, parse_moment, sink_flags
from olstream.shared import kafka_admin
from olstream.shared.errors import ConfigError, InfrastructureError
from olstream.shared.kafka_admin import retrying
from tests.support.fake_message import FakeMessage

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)


# -- times ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "back_ms"),
    [("2h", 7_200_000), ("30m", 1_800_000), ("1d12h", 129_600_000), ("45s", 45_000), ("1w", 604_800_000)],
)
def test_a_duration_is_that_long_before_now(text: str, back_ms: int) -> None:
    assert parse_moment(text, NOW, "--since") == NOW_MS - back_ms


@pytest.mark.parametrize(
    "text",
    ["2026-03-01T11:00:00Z", "2026-03-01T11:00:00+00:00", "2026-03-01T13:00:00+02:00", "2026-03-01T11:00"],
)
def test_an_iso_time_is_utc_unless_it_has_an_offset(text: str) -> None:
    assert parse_moment(text, NOW, "--since") == NOW_MS - 3_600_000


@pytest.mark.parametrize("text", ["yesterday", "2h30", "h", "-2h", "2026-13-01"])
def test_anything_else_is_one_clear_error(text: str) -> None:
    with pytest.raises(ConfigError, match=r"neither an ISO time .* nor a duration"):
        parse_moment(text, NOW, "--since")


def test_a_range_holds_since_and_not_until() -> None:
    r = TimeRange(100, 200)
    assert [r.contains(t) for t in (99, 100, 199, 200, None, -1)] == [False, True, True, False, False, False]
    assert TimeRange().contains(None) and TimeRange(None, 5).contains(4) and not TimeRange(5).contains(4)
    assert r.describe() == "[1970-01-01T00:00:00.100Z, 1970-01-01T00:00:00.200Z)"


# -- commit metadata -----------------------------------------------------------------------
def test_the_range_goes_through_the_commit_metadata_and_nothing_else_reads_as_one() -> None:
    for times in (TimeRange(1, 2), TimeRange(None, 7), TimeRange()):
        assert decode_metadata(encode_metadata(times, 42)) == (times, 42)
    others = [
        '{"olstream.replay":2,"end":1}',
        '{"olstream.replay":1,"end":-1}',
        '{"olstream.replay":1,"end":true}',
    ]
    others += ['{"olstream.replay":1,"since":"a","end":1}', "[1]", "{}", "x", ""]
    for other in (None, *others):
        assert decode_metadata(other) is None, other


# -- settings ------------------------------------------------------------------------------
def sink(**flags: Any) -> SinkSettings:
    return build_settings({"console": True, **flags}, {}, Path("/nonexistent"))


def replay_settings(flags: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    return build_replay_settings(flags, build_settings(sink_flags({"console": True, **flags}), env or {},
                                                       Path("/nonexistent")), env or {}, NOW)  # fmt: skip


def test_the_group_is_derived_from_topic_destination_range_and_filters() -> None:
    base = group_name(sink(), "2h", None, None, None)
    assert base.startswith("olstream-replay.openlineage.events.") and len(base.rsplit(".", 1)[1]) == 12
    assert group_name(sink(), "2h", None, None, None) == base  # the same replay again: the same group
    others = {
        group_name(sink(), "3h", None, None, None),
        group_name(sink(), "2h", "1h", None, None),
        group_name(sink(), "2h", None, "job", None),
        group_name(sink(), "2h", None, None, "ns"),
        group_name(sink(file="/tmp/x.ndjson", console=None), "2h", None, None, None),
        group_name(sink(topic="other"), "2h", None, None, None),
    }
    assert base not in others and len(others) == 6


def test_the_live_sinks_group_is_refused_wherever_it_comes_from() -> None:
    with pytest.raises(ConfigError, match="is the live sink's consumer group"):
        replay_settings({"group": "olstream-sink"})
    env = {"OLSTREAM_SINK_GROUP": "live", "OLSTREAM_REPLAY_GROUP": "live"}
    with pytest.raises(
        ConfigError, match=r"live is the live sink's consumer group \(env OLSTREAM_SINK_GROUP"
    ):
        replay_settings({}, env)
    assert (
        replay_settings({"group": "olstream-sink"}, {"OLSTREAM_SINK_GROUP": "live"}).group == "olstream-sink"
    )


def test_settings_come_from_flags_then_olstream_replay_variables_then_the_replay_section(
    tmp_path: Path,
) -> None:
    config = tmp_path / "olstream.yml"
    config.write_text("replay:\n  rate: 50\n  job: from-file\n  namespace: ns\nsink:\n  concurrency: 3\n")
    env = {"OLSTREAM_CONFIG": str(config), "OLSTREAM_REPLAY_JOB": "from-env", "OLSTREAM_REPLAY_SINCE": "2h"}
    s = replay_settings({"rate": "7"}, env)
    assert (s.rate, s.job, s.namespace) == (7.0, "from-env", "ns")
    assert (s.times.since_ms, s.times.until_ms) == (NOW_MS - 7_200_000, None)
    assert (
        s.sink.concurrency == 3 and s.sink.group == "olstream-sink" and s.group.startswith("olstream-replay.")
    )
    assert dict(s.sources)["job"] == "env OLSTREAM_REPLAY_JOB" and dict(s.sources)["namespace"].startswith(
        "file"
    )


def test_an_empty_range_and_a_negative_rate_are_refused() -> None:
    with pytest.raises(ConfigError, match="empty range"):
        replay_settings({"since": "1h", "until": "2h"})
    with pytest.raises(ConfigError, match="invalid replay setting rate"):
        replay_settings({"rate": "-1"})


def test_the_cli_refuses_the_live_group_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert olstream_main(["replay", "--console", "--group", "olstream-sink"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("olstream replay: group olstream-sink is the live sink's") and err.count("\n") == 1


def test_print_config_shows_both_layers_with_secrets_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        olstream_main(["replay", "--url", "https://user:pw@example.com", "--since", "2h", "--print-config"])
        == 0
    )
    out = capsys.readouterr().out
    assert "pw" not in out and '"since": "2h"' in out and '"group": "olstream-sink"' in out


# -- planning ------------------------------------------------------------------------------
class Broker:
    """One topic's partitions as the broker has them: message timestamps by offset, and one group's
    commits (offset, metadata)."""

    def __init__(
        self, timestamps: dict[int, list[int]], commits: dict[int, tuple[int, str]] | None = None
    ) -> None:
        self.timestamps = timestamps
        self.commits = commits or {}
        self.fail_times = 0  # offsets_for_times answers this many times with a time-out first

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float = 0, cached: bool = False
    ) -> tuple[int, int]:
        return 0, len(self.timestamps[tp.partition])

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float = 0) -> list[TopicPartition]:
        if self.fail_times:
            self.fail_times -= 1
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        out = []
        for tp in partitions:
            found = next((o for o, t in enumerate(self.timestamps[tp.partition]) if t >= tp.offset), -1)
            out.append(TopicPartition(tp.topic, tp.partition, found))
        return out

    def committed(self, partitions: list[TopicPartition], timeout: float = 0) -> list[TopicPartition]:
        return [
            TopicPartition(p.topic, p.partition, *self.commits[p.partition]) if p.partition in self.commits
            else TopicPartition(p.topic, p.partition, -1001)
            for p in partitions
        ]  # fmt: skip


def plan(broker: Broker, times: TimeRange, restart: bool = False) -> ReplayBounds:
    return plan_bounds(broker, "t", sorted(broker.timestamps), times, "g", restart, 5.0)  # type: ignore[arg-type]


def test_a_range_is_resolved_with_offsets_for_times_within_each_partition() -> None:
    broker = Broker({0: [10, 20, 30, 40], 1: [15, 25], 2: []})
    got = plan(broker, TimeRange(20, 35))
    assert got.partitions == (PartitionRange(0, 1, 3), PartitionRange(1, 1, 2), PartitionRange(2, 0, 0))
    assert plan(broker, TimeRange()).partitions[0] == PartitionRange(0, 0, 4)  # all of it, to its end now
    assert plan(broker, TimeRange(45)).remaining == 0  # after the last message: nothing
    assert not got.resumed and got.remaining == 3


def test_a_look_up_that_times_out_right_after_topic_creation_is_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kafka_admin, "RETRY_PAUSE", 0.0)
    broker = Broker({0: [10, 20]})
    broker.fail_times = 2
    assert plan(broker, TimeRange(15)).partitions == (PartitionRange(0, 1, 2),)

    answers = [KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS]

    def coordinator_not_ready() -> str:
        if answers:  # a new broker's first group commits and look-ups of commits
            raise KafkaException(KafkaError(answers.pop()))
        return "answered"

    assert retrying(coordinator_not_ready, "reading commits", 5.0) == "answered"

    def refused() -> None:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    with pytest.raises(InfrastructureError, match="looking"):
        retrying(refused, "looking", 5.0)


def test_a_replay_run_again_goes_on_from_its_commits_within_its_stored_range() -> None:
    stored = encode_metadata(TimeRange(20, 35), 3)
    broker = Broker({0: [10, 20, 30, 40, 50, 60]}, {0: (2, stored)})
    got = plan(broker, TimeRange(0, 100))  # a duration resolved later: the stored range wins
    assert got.resumed and got.times == TimeRange(20, 35) and got.partitions == (PartitionRange(0, 2, 3),)
    assert not plan(broker, TimeRange(0, 100), restart=True).resumed


def test_commits_that_are_not_a_replays_are_refused() -> None:
    broker = Broker({0: [10]}, {0: (1, "")})
    with pytest.raises(ConfigError, match=r"not those of one replay.*--restart"):
        plan(broker, TimeRange())


# -- bounded delivery ----------------------------------------------------------------------
def message(partition: int, offset: int, ts: int, value: bytes, headers: Sequence[Any] = ()) -> FakeMessage:
    return FakeMessage(partition, offset, timestamp_ms=ts, value=value, headers=headers)


class Consumer:
    def __init__(self) -> None:
        self.paused: list[tuple[str, int]] = []
        self.commits: list[TopicPartition] = []

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused += [(p.topic, p.partition) for p in partitions]

    def resume(self, partitions: list[TopicPartition]) -> None: ...

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.commits += offsets

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, -1001) for p in partitions]


def doc(kind: str, job: str, namespace: str = "ns") -> bytes:
    return json.dumps(
        {"eventType": kind, "job": {"namespace": namespace, "name": job}, "run": {"runId": job}}
    ).encode()


def test_the_bounded_sink_takes_its_range_leaves_the_rest_and_ends_at_the_end() -> None:
    bounds = ReplayBounds("t", TimeRange(100, 200), (PartitionRange(0, 0, 4), PartitionRange(1, 0, 0)))
    consumer = Consumer()
    bounded = BoundedSink(SinkSettings(transport="console"), ConsoleTransport(), consumer, None,  # type: ignore[arg-type]
                          bounds, Selection(bounds.times, namespace="ns"))  # fmt: skip
    bounded.on_assign(consumer, [TopicPartition("t", 0), TopicPartition("t", 1)])  # type: ignore[arg-type]
    bounded._apply_pause()
    assert ("t", 1) in consumer.paused  # an empty partition of the range is paused from the start
    bounded._admit(message(0, 0, 150, doc("START", "a")))  # type: ignore[arg-type]
    bounded._admit(message(0, 1, 90, doc("START", "b")))  # type: ignore[arg-type]  # out of order: too early
    bounded._admit(message(0, 2, 160, doc("START", "c", "other")))  # type: ignore[arg-type]
    assert not bounded._at_end()  # offset 3 still to come
    headers = [
        (wire.HEADER_EVENT_TYPE, b"COMPLETE"),
        (wire.HEADER_JOB_NAMESPACE, b"ns"),
        (wire.HEADER_JOB_NAME, b"d"),
    ]
    bounded._admit(message(0, 3, 170, b"{}", headers))  # type: ignore[arg-type]
    bounded._admit(message(0, 4, 180, doc("START", "past-the-end")))  # type: ignore[arg-type]
    assert bounded.buffered == 2 and bounded.left == 2 and ("t", 0) in bounded.done
    while not bounded.ready.empty():  # what the sink's workers would send
        bounded._settle(bounded.ready.get_nowait(), DELIVERED, 0)
    assert bounded.commit_finished() and bounded._at_end()
    assert [(c.partition, c.offset) for c in consumer.commits] == [(0, 4)]
    assert decode_metadata(consumer.commits[0].metadata) == (TimeRange(100, 200), 4)  # each commit keeps it
    progress = bounded.progress()
    assert (progress.done, progress.total, progress.delivered, progress.left) == (4, 4, 2, 2)
    assert by_type(progress.by_type) == "COMPLETE 1, START 1"


def test_event_types_come_from_the_header_else_the_json() -> None:
    assert event_type_of([(wire.HEADER_EVENT_TYPE, b"FAIL")], b"{}") == "FAIL"
    assert event_type_of(None, b'{"eventType":"RUNNING"}') == "RUNNING"
    assert event_type_of(None, b"not json") == "(none)"


def test_the_pace_spaces_events_at_the_rate() -> None:
    clock = [10.0]
    pace = Pace(4.0, lambda: clock[0])
    assert [pace.delay(1) for _ in range(3)] == [0.0, 0.25, 0.5]
    clock[0] = 20.0
    assert pace.delay(2) == 0.0 and pace.delay(1) == 0.5
    assert Pace(0.0).delay(100) == 0.0


def test_the_bounded_sink_waits_for_the_pace_before_sending() -> None:
    bounds = ReplayBounds("t", TimeRange(), (PartitionRange(0, 0, 3),))
    bounded = BoundedSink(SinkSettings(transport="console"), ConsoleTransport(), Consumer(), None,  # type: ignore[arg-type]
                          bounds, Selection(), rate=20.0)  # fmt: skip

    class Quiet:
        async def send(self, event: PendingEvent) -> Any:
            return DELIVERED

    bounded.transport = Quiet()  # type: ignore[assignment]

    async def three() -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        for offset in range(3):
            await bounded._send([PendingEvent("t", 0, offset, None, b"{}", 0)])
        return loop.time() - started

    assert asyncio.run(three()) >= 0.09  # the 2nd and 3rd wait 50 ms each


def test_a_stop_while_waiting_for_the_pace_sends_nothing_and_leaves_the_event_uncommitted() -> None:
    bounds = ReplayBounds("t", TimeRange(), (PartitionRange(0, 0, 3),))
    consumer = Consumer()
    bounded = BoundedSink(SinkSettings(transport="console"), ConsoleTransport(), consumer, None,  # type: ignore[arg-type]
                          bounds, Selection(), rate=0.5)  # fmt: skip
    bounded.on_assign(consumer, [TopicPartition("t", 0)])  # type: ignore[arg-type]
    bounded._admit(message(0, 0, 1, doc("START", "a")))  # type: ignore[arg-type]
    bounded._admit(message(0, 1, 2, doc("START", "b")))  # type: ignore[arg-type]
    first, second = bounded.ready.get_nowait(), bounded.ready.get_nowait()

    async def stop_during_the_wait() -> tuple[Any, float]:
        loop = asyncio.get_running_loop()
        assert await bounded._send([first]) == [DELIVERED]  # the first slot is now
        loop.call_later(0.05, bounded.stopping.set)
        started = loop.time()
        results = await bounded._send([second])  # its slot is 2 s away
        return results, loop.time() - started

    results, waited = asyncio.run(stop_during_the_wait())
    assert waited < 1.0 and results[0].outcome.value == "retry"
    bounded._settle(first, DELIVERED, 0)
    bounded._settle(second, results[0], 0)
    assert bounded.commit_finished() and [c.offset for c in consumer.commits] == [
        1
    ]  # the second: uncommitted
    assert bounded.delivered == 1 and bounded.buffered == 1


def test_the_progress_bar_is_only_drawn_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with progress_bar(False) as report:
        assert report is None
    with progress_bar(True) as report:
        assert report is not None
        report(ReplayProgress(30, 100, 25, 1, 4))
    err = capsys.readouterr().err
    assert "30/100" in err and "delivered 25, dead-lettered 1" in err
