"""deploy/prometheus's rules in a real Prometheus scraping a running pipeline: when the receiver stops
answering, OlstreamSinkCircuitOpen fires; when it is back, the alert ends.

Source, worker and sink run as processes against the session's broker, each serving its metrics on
a port of its own; Prometheus (Debian's package, its own temp dir and port) scrapes all three every
second and evaluates the shipped rules every second, with every `for:` cut to 2 s.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from olstream.devkit.process import free_port
from tests.support.pipeline_support import GrowingLog
from tests.support.prometheus import Prometheus, quick_rules
from tests.support.receiver import Receiver
from tests.support.stream_support import OLSTREAM, env, tail

pytestmark = pytest.mark.integration

ALERT = "OlstreamSinkCircuitOpen"


def wait_for(what: str, check: Callable[[], bool], timeout: float, explain: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"not within {timeout} s: {what}\n{explain()}")


def test_the_receiver_failing_fires_the_circuit_alert_and_its_return_ends_it(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    name = f"alerts-{uuid.uuid4().hex[:8]}"
    log = GrowingLog(tmp_path / "log.db")
    log.append(10)
    ports = {"source": free_port(), "worker": free_port(), "sink": free_port()}
    common = ["--bootstrap", kafka_bootstrap]
    with Receiver(validate=False) as receiver:
        commands = {
            "source": [*OLSTREAM, "source", "--log", log.url, "--topic", f"{name}.eventlog", *common],
            "worker": [
                *OLSTREAM, "worker", "--app-id", f"{name}-worker", "--data-dir", str(tmp_path / "w"),
                "--input-topic", f"{name}.eventlog", "--output-topic", f"{name}.events",
                "--errors-topic", f"{name}.errors", "--session-timeout", "6", *common,
            ],
            "sink": [
                *OLSTREAM, "sink", "--topic", f"{name}.events", "--group", f"{name}-sink",
                "--dlq-topic", f"{name}.dlq", "--url", receiver.url, "--max-backoff", "1", *common,
            ],
        }  # fmt: skip
        procs: dict[str, subprocess.Popen[bytes]] = {}
        rules = quick_rules(tmp_path / "rules.yml")
        targets = {f"olstream-{s}": [f"127.0.0.1:{port}"] for s, port in ports.items()}
        prometheus = Prometheus(tmp_path / "prometheus", targets, rules)

        def explain() -> str:
            logs = "\n".join(f"--- {s}\n{tail(tmp_path / f'{s}.log', 15)}" for s in procs)
            try:
                alerts = prometheus.alerts()
            except OSError as e:
                alerts = [{"error": str(e)}]
            return f"{logs}\n--- prometheus\n{prometheus.tail(10)}\nalerts: {alerts}"

        try:
            for service, cmd in commands.items():
                with (tmp_path / f"{service}.log").open("ab") as out:
                    procs[service] = subprocess.Popen(
                        [*cmd, "--metrics-port", str(ports[service])],
                        stdout=out, stderr=subprocess.STDOUT, env=env(), start_new_session=True,
                    )  # fmt: skip
            prometheus.start()

            # the pipeline delivers; Prometheus scrapes every service, the new gauges included
            wait_for("events delivered", lambda: receiver.count >= 10, 60, explain)

            def scraped() -> bool:
                up = {r["metric"]["job"]: r["value"][1] for r in prometheus.query('up{job=~"olstream.*"}')}
                return (
                    up == {job: "1" for job in targets}
                    and len(prometheus.query("olstream_stream_input_lag")) > 0
                    and [r["value"][1] for r in prometheus.query("olstream_sink_circuit_open")] == ["0"]
                    and len(prometheus.query("olstream_healthy == 1")) == 3
                )

            wait_for("every target scraped, circuit closed", scraped, 30, explain)
            assert prometheus.firing(ALERT) == [], explain()

            receiver.stop()  # the receiver goes away: connections refused
            log.append(10)  # new runs for the sink to deliver
            wait_for(f"{ALERT} firing", lambda: prometheus.firing(ALERT) != [], 40, explain)
            [alert] = prometheus.firing(ALERT)
            assert alert["labels"]["job"] == "olstream-sink" and alert["labels"]["severity"] == "critical"
            assert alert["labels"]["instance"] == f"127.0.0.1:{ports['sink']}"
            assert alert["annotations"]["runbook_url"] == "docs/operations.md#olstreamsinkcircuitopen"
            assert [a for a in prometheus.alerts() if a["labels"]["alertname"] == "OlstreamServiceDown"] == []

            receiver.start()  # back on the same port: the next delivery closes the circuit
            wait_for(f"{ALERT} ended", lambda: prometheus.firing(ALERT) == [], 40, explain)
            for service, proc in procs.items():
                assert proc.poll() is None, f"{service} exited {proc.returncode}\n{explain()}"
        finally:
            prometheus.stop()
            for proc in procs.values():
                if proc.poll() is None:
                    proc.terminate()
            for proc in procs.values():
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
