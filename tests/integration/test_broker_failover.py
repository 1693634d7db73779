"""A broker dying under load: 3 brokers, RF 3, min.insync.replicas 2, kill -9 of the broker that
leads most input partitions while source, two workers and the sink run. Nothing is lost, repeats
are byte-identical, and the pipeline goes on through the leader change and after the broker returns.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]

from tests.support.pipeline_support import (
    GrowingLog,
    Pipeline,
    assert_complete_identical_and_ordered,
    local_cluster,
    wait_until_delivered,
    wait_until_settled,
)
from tests.support.stream_support import consume_all
from tests.support.stream_support import repeats as stream_repeats

pytestmark = pytest.mark.integration

RUNS_PER_PHASE = 400


def _replication(admin: AdminClient, topic: str) -> tuple[set[int], str]:
    meta = admin.list_topics(topic=topic, timeout=10)
    replicas = {len(p.replicas) for p in meta.topics[topic].partitions.values()}
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    return replicas, configs["min.insync.replicas"].value


def _leaders(admin: AdminClient, topic: str) -> Counter[int]:
    meta = admin.list_topics(topic=topic, timeout=10)
    return Counter(p.leader for p in meta.topics[topic].partitions.values())


def _wait_for_topics(admin: AdminClient, names: list[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=10).topics
        if all(n in topics for n in names):
            return
        time.sleep(0.5)
    raise AssertionError(f"topics {names} not created within {timeout} s")


def test_kill_9_of_the_leading_broker_under_load_loses_nothing(tmp_path: Path) -> None:
    with local_cluster(tmp_path / "kafka", brokers=3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        log = GrowingLog(tmp_path / "events.db")
        log.append(RUNS_PER_PHASE)
        pipeline = Pipeline(tmp_path, cluster.bootstrap, log.url, f"failover-{uuid.uuid4().hex[:8]}")
        pipeline.start()
        try:
            _wait_for_topics(admin, [pipeline.input, pipeline.output])
            starts, ends = log.expected()
            deadline = time.monotonic() + 120
            while len(pipeline.delivered()) < (len(starts) + len(ends)) // 3:
                assert time.monotonic() < deadline, pipeline.logs()
                pipeline.check_running()
                time.sleep(0.2)

            # every topic of the pipeline: 3 replicas, 2 in sync (the default for 3 brokers)
            changelog = next(t for t in admin.list_topics(timeout=10).topics if t.endswith("-runs-changelog")
                             and t.startswith(f"{pipeline.name}-worker"))  # fmt: skip
            for topic in (pipeline.input, pipeline.output, pipeline.errors, changelog):
                assert _replication(admin, topic) == ({3}, "2"), topic

            # kill -9 the broker that leads most input partitions, while events still flow
            leader_id, led = _leaders(admin, pipeline.input).most_common(1)[0]
            victim = next(n for n in cluster.state.nodes if n.port == _port_of(admin, leader_id))
            os.kill(victim.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            at_kill = len(pipeline.delivered())

            # more runs while the broker is down: every stage carries them through the new leaders
            log.append(RUNS_PER_PHASE)
            starts, ends = log.expected()
            wait_until_delivered(pipeline, starts, ends, timeout=240)
            degraded = time.monotonic() - killed_at
            assert leader_id not in _leaders(admin, pipeline.input)

            # the broker returns; the pipeline goes on after it
            restarted = cluster.restart_missing()
            assert len(restarted.nodes) == 3 and restarted.started
            log.append(RUNS_PER_PHASE)
            starts, ends = log.expected()
            wait_until_delivered(pipeline, starts, ends, timeout=240)
            lines = wait_until_settled(pipeline, timeout=120)
            pipeline.check_running()
        finally:
            pipeline.stop()
        repeats = assert_complete_identical_and_ordered(pipeline.delivered(), starts, ends)
        on_topic = consume_all(pipeline.bootstrap, pipeline.output, idle=1.0)  # read_committed
        assert len(on_topic) == len(lines) - repeats, "the sink's repeats are its own"
        assert stream_repeats(o.value for o in on_topic) == 0, "exactly_once: each event once on the topic"
        print(
            f"killed broker {leader_id} (leader of {led} input partitions) with {at_kill} events of the "
            f"first {RUNS_PER_PHASE} runs delivered; all runs of phase 2 delivered "
            f"{degraded:.1f} s after the kill; {len(lines)} events, {repeats} byte-identical repeats"
        )


def _port_of(admin: AdminClient, broker_id: int) -> int:
    return int(admin.list_topics(timeout=10).brokers[broker_id].port)
