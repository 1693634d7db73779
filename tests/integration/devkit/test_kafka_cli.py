"""`olstream kafka up|status|down` and `olstream postgres up|status|down` as a user runs them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, Producer

from olstream.devkit import kafka
from olstream.devkit.process import free_port, pid_alive
from olstream.shared.kafka_admin import ensure_topic
from tests.support.pipeline_support import kafka_processes_of

pytestmark = pytest.mark.integration


def run(cmd: list[str], env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
    )


@pytest.fixture
def server_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="olstream-cli-"))
    path.chmod(0o755)  # reachable by the `postgres` account when the tests run as root
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_kafka_up_status_down(
    olstream_cmd: list[str], subprocess_env: dict[str, str], server_dir: Path
) -> None:
    port = free_port()
    controller = free_port(avoid=frozenset({port}))
    data_dir = server_dir / "kafka"
    up = [*olstream_cmd, "kafka", "up", "--port", str(port), "--controller-port", str(controller)]
    up += ["--data-dir", str(data_dir)]
    try:
        first = run(up, subprocess_env)
        assert first.returncode == 0, first.stderr
        bootstrap = first.stdout.strip().splitlines()[-1]
        assert bootstrap == f"127.0.0.1:{port}"

        second = run(up, subprocess_env)
        assert second.returncode == 0, second.stderr
        assert "already running" in second.stderr
        assert second.stdout.strip() == bootstrap

        status = run([*olstream_cmd, "kafka", "status", "--data-dir", str(data_dir)], subprocess_env)
        assert status.returncode == 0
        assert "running: yes" in status.stdout
        assert f"address: {bootstrap}" in status.stdout
        assert "version: " in status.stdout

        topic = "cli-round-trip"
        ensure_topic(bootstrap, topic, 1)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(topic, value=b"hello")
        assert producer.flush(30) == 0
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "cli", "auto.offset.reset": "earliest"}
        )
        consumer.subscribe([topic])
        msg = None
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None:
                break
        consumer.close()
        assert msg is not None and msg.error() is None and msg.value() == b"hello"
        assert (data_dir / "logs" / "server.log").stat().st_size > 0
        pid = json.loads((data_dir / "broker.json").read_text())["pid"]
    finally:
        down = run([*olstream_cmd, "kafka", "down", "--data-dir", str(data_dir)], subprocess_env)
    assert down.returncode == 0
    assert "stopped Kafka" in down.stdout
    assert not pid_alive(pid)
    after = run([*olstream_cmd, "kafka", "status", "--data-dir", str(data_dir)], subprocess_env)
    assert "running: no" in after.stdout
    assert after.returncode != 0


def test_kafka_up_rejects_a_bad_config(
    olstream_cmd: list[str], subprocess_env: dict[str, str], server_dir: Path
) -> None:
    """A config Kafka refuses: `up` exits non-zero and shows Kafka's reason."""
    port = free_port()
    data_dir = server_dir / "broken"
    # The same port for the client and the controller listener: Kafka rejects the config.
    cmd = [*olstream_cmd, "kafka", "up", "--port", str(port), "--controller-port", str(port)]
    result = run([*cmd, "--data-dir", str(data_dir), "--start-timeout", "60"], subprocess_env)
    assert result.returncode != 0
    assert "olstream kafka up:" in result.stderr
    assert "port" in result.stderr.lower()
    assert not (data_dir / "broker.json").exists()


def test_kafka_up_timeout_prints_the_log_tail_and_kills_the_broker(
    olstream_cmd: list[str], subprocess_env: dict[str, str], server_dir: Path
) -> None:
    port = free_port()
    controller = free_port(avoid=frozenset({port}))
    data_dir = server_dir / "slow"
    cmd = [*olstream_cmd, "kafka", "up", "--port", str(port), "--controller-port", str(controller)]
    result = run([*cmd, "--data-dir", str(data_dir), "--start-timeout", "1"], subprocess_env)
    assert result.returncode != 0
    assert "did not start" in result.stderr
    assert "last lines of" in result.stderr
    assert not (data_dir / "broker.json").exists()
    assert kafka_processes_of(data_dir) == []


def test_kafka_down_never_kills_an_unrelated_pid(server_dir: Path) -> None:
    """A stale state file whose pid now belongs to another process: `down` leaves that process alone."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = {
            "pid": other.pid,
            "version": "4.4.0",
            "host": "127.0.0.1",
            "port": 1,
            "controller_port": 2,
            "data_dir": str(server_dir),
            "started_at": 0.0,
        }
        (server_dir / "broker.json").write_text(json.dumps(state))
        assert not kafka.broker_status(server_dir).running
        assert kafka.stop_broker(server_dir) is None
        assert other.poll() is None
        assert not (server_dir / "broker.json").exists()
    finally:
        other.kill()
        other.wait()


def test_postgres_up_status_down(
    olstream_cmd: list[str], subprocess_env: dict[str, str], server_dir: Path
) -> None:
    port = free_port()
    data_dir = server_dir / "pg"
    up = [*olstream_cmd, "postgres", "up", "--port", str(port), "--data-dir", str(data_dir)]
    try:
        first = run(up, subprocess_env)
        assert first.returncode == 0, first.stderr
        url = first.stdout.strip().splitlines()[-1]
        assert url == f"postgresql://olstream:olstream@127.0.0.1:{port}/olstream"
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT current_user, current_database()").fetchone()
        assert row == ("olstream", "olstream")
        second = run(up, subprocess_env)
        assert second.returncode == 0 and "already running" in second.stderr
        status = run([*olstream_cmd, "postgres", "status", "--data-dir", str(data_dir)], subprocess_env)
        assert status.returncode == 0 and "running: yes" in status.stdout and url in status.stdout
    finally:
        down = run([*olstream_cmd, "postgres", "down", "--data-dir", str(data_dir)], subprocess_env)
    assert down.returncode == 0 and "stopped PostgreSQL" in down.stdout
    after = run([*olstream_cmd, "postgres", "status", "--data-dir", str(data_dir)], subprocess_env)
    assert "running: no" in after.stdout


def test_postgres_url_fixture_gives_a_fresh_database(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (1)")
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (1,)
