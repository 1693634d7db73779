"""The optional batch endpoint: arrays to `{url}/batch`, per-event failures handled as in the spec."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.receiver import Receiver, Reply, Request
from tests.support.sink_events import identity, make_events, produce
from tests.support.sink_harness import (
    assert_all_delivered_in_order,
    committed_total,
    run_sink,
)
from tests.support.stream_support import consume_all

pytestmark = pytest.mark.integration

MakeTopic = Callable[..., str]


def canonical(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def test_batches_with_per_event_failures_retry_or_dead_letter_single_events(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    events = make_events(runs=150, events_per_run=3, jobs=15)
    produce(kafka_bootstrap, topic, events)
    lock = threading.Lock()
    accepted: list[Request] = []  # one per event the receiver kept, in order
    retried_once: set[bytes] = set()
    sizes: list[int] = []

    def respond(request: Request, n: int) -> Reply:
        docs = json.loads(request.body)
        if not request.path.endswith("/lineage/batch"):  # the single-event endpoint (a batch of 1)
            docs = [docs]
        failed = []
        with lock:
            sizes.append(len(docs))
            for i, doc in enumerate(docs):
                body, (job, _run, kind) = canonical(doc), identity(canonical(doc))
                if job == "sinktest/job-4" and kind == "RUNNING":
                    failed.append({"index": i, "reason": "Unsupported facets", "retriable": False})
                elif job == "sinktest/job-7" and body not in retried_once and len(retried_once) < 3:
                    retried_once.add(body)
                    failed.append({"index": i, "reason": "Timeout", "retriable": True})
                else:
                    accepted.append(Request("POST", request.path, {}, body, 0.0, 200))
        if not request.path.endswith("/lineage/batch"):
            return Reply(201) if not failed else Reply(422 if not failed[0]["retriable"] else 503)
        if not failed:
            return Reply(204)
        summary = {"received": len(docs), "successful": len(docs) - len(failed), "failed": len(failed)}
        answer = {"status": "partial_success", "summary": summary, "failed_events": failed}
        return Reply(200, json.dumps(answer).encode(), (("Content-Type", "application/json"),))

    log = tmp_path / "sink.log"
    with Receiver() as receiver:
        receiver.respond_with(respond)
        rc = run_sink(
            kafka_bootstrap, topic, unique_group, "--url", receiver.url, "--batch-size", "20",
            "--concurrency", "2", "--max-backoff", "1", "--dlq-topic", f"{topic}.dlq",
            log_path=log, timeout=60,
        )  # fmt: skip
        assert receiver.invalid == []
    assert rc == 0, log.read_text()[-3000:]
    assert max(sizes) > 1
    assert len(retried_once) == 3
    rejected = [
        e for e in events if identity(e.value)[0] == "sinktest/job-4" and identity(e.value)[2] == "RUNNING"
    ]
    assert_all_delivered_in_order([e for e in events if e not in rejected], accepted)
    dead = consume_all(kafka_bootstrap, f"{topic}.dlq", expect=len(rejected), idle=0.5)
    assert sorted(m.value for m in dead) == sorted(e.value for e in rejected)
    headers = dict(dead[0].headers)
    assert headers["olstream.status"] == b"200" and b"Unsupported facets" in headers["olstream.response"]
    assert committed_total(kafka_bootstrap, unique_group, topic) == len(events)
