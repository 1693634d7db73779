"""Shared fixtures: a real Kafka broker and a real PostgreSQL, started only when a test asks for them.

- `kafka_bootstrap` (session): "host:port" of `$OLSTREAM_BOOTSTRAP`, else of a broker started with the
  same code as `olstream kafka up` (free ports, temp data dir) and stopped when the session ends;
  the processes the tests start find it in `OLSTREAM_KAFKA_BOOTSTRAP`.
- `make_topic(partitions=1, config=None) -> str`: creates a uniquely named topic, returns its name.
- `unique_topic`: a unique topic NAME (not created: create it with the partitions the test needs).
- `unique_group`: a unique consumer group id.
- `schema_registry` (session): the Confluent-compatible URL of a local Apicurio Registry started with the
  same code as `olstream registry up` (a free port, a temp data dir; its tarball from Maven Central,
  cached in ~/.cache/olstream/apicurio) and stopped when the session ends.
- `postgres_server` (session): URL of `$OLSTREAM_PG_URL`'s server, else of a server started with the
  same code as `olstream postgres up`; `postgres_url`: a fresh database on it per test (dropped after).
Tests using these fixtures are marked `integration` (and `postgres`) automatically.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from olstream.devkit import kafka, postgres, registry
from olstream.devkit.kafka_config import DEFAULT_KAFKA_VERSION, KafkaSettings
from olstream.devkit.postgres import PostgresSettings
from olstream.devkit.process import free_port
from olstream.shared import deprecated, logs
from olstream.shared.errors import InfrastructureError
from olstream.shared.kafka_admin import ensure_topic

# The fuzz tests explore new examples on every local run; CI (CI=true) runs a fixed set, so that a
# red build always names a reproducible input (the failure prints it either way).
hypothesis_settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")

# The test suite's own switch naming a running broker (docs/testing.md). It is also the old name of
# the commands' OLSTREAM_KAFKA_BOOTSTRAP, which they still read, with a warning: taken out of the
# environment here, so that no `olstream` process a test starts sees it (tests count WARNING lines).
EXTERNAL_BOOTSTRAP = os.environ.pop("OLSTREAM_BOOTSTRAP", None)

KAFKA_FIXTURES = {"kafka_bootstrap", "make_topic", "schema_registry"}
POSTGRES_FIXTURES = {"postgres_server", "postgres_url"}

MakeTopic = Callable[..., str]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & (KAFKA_FIXTURES | POSTGRES_FIXTURES):
            item.add_marker(pytest.mark.integration)
        if names & POSTGRES_FIXTURES:
            item.add_marker(pytest.mark.postgres)
        quarantined = item.get_closest_marker("quarantined")
        if quarantined is not None and not os.environ.get("OLSTREAM_RUN_QUARANTINED"):
            reason = quarantined.args[0] if quarantined.args else "an open defect"
            item.add_marker(
                pytest.mark.skip(reason=f"quarantined ({reason}); OLSTREAM_RUN_QUARANTINED=1 runs it")
            )


def _slug(request: pytest.FixtureRequest) -> str:
    """A short, Kafka-safe rendering of the test's name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:60]


@pytest.fixture(autouse=True)
def _deprecations_of_this_test_only() -> Iterator[None]:
    """Each test warns about the old names it uses as a new process would, once, whatever the tests
    before it used."""
    deprecated.reset()
    yield
    deprecated.reset()


@pytest.fixture(autouse=True)
def _secrets_of_this_test_only() -> Iterator[None]:
    """The values a test registers with the log redactor are forgotten after it: a password such as
    `olstream` (the test PostgreSQL's) must not redact another test's paths and names."""
    before = set(logs._SECRETS)
    yield
    logs._SECRETS.clear()
    logs._SECRETS.update(before)


def _stop_services_on_sigterm() -> None:
    """Turn SIGTERM (e.g. `timeout pytest ...`) into KeyboardInterrupt, so the session's teardown still
    stops the broker and the server (they run in their own sessions and would outlive pytest)."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:

        def interrupt(signum: int, frame: object) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        signal.signal(signal.SIGTERM, interrupt)


def _private_tmpdir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)  # PostgreSQL runs as the `postgres` account when the tests run as root
    return path


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    if EXTERNAL_BOOTSTRAP:
        os.environ["OLSTREAM_KAFKA_BOOTSTRAP"] = EXTERNAL_BOOTSTRAP  # subprocesses of the tests inherit it
        try:
            yield EXTERNAL_BOOTSTRAP
        finally:
            os.environ.pop("OLSTREAM_KAFKA_BOOTSTRAP", None)
        return
    _stop_services_on_sigterm()
    data_dir = _private_tmpdir("olstream-kafka-")
    version = os.environ.get("OLSTREAM_KAFKA_VERSION", DEFAULT_KAFKA_VERSION)
    state = None
    try:
        for attempt in range(3):
            port = free_port()
            settings = KafkaSettings(
                version=version,
                port=port,
                controller_port=free_port(avoid=frozenset({port})),
                data_dir=data_dir,
            )
            try:
                state, _ = kafka.start_broker(settings)
                break
            except InfrastructureError as e:
                if "already in use" not in str(e) or attempt == 2:
                    raise
        assert state is not None
        os.environ["OLSTREAM_KAFKA_BOOTSTRAP"] = state.bootstrap  # subprocesses of the tests inherit it
        yield state.bootstrap
    finally:
        os.environ.pop("OLSTREAM_KAFKA_BOOTSTRAP", None)
        kafka.stop_broker(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[str]:
    _stop_services_on_sigterm()
    data_dir = _private_tmpdir("olstream-registry-")
    settings = registry.RegistrySettings(data_dir=data_dir, port=free_port())
    try:
        yield registry.up(settings)
    finally:
        registry.down(settings)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def make_topic(kafka_bootstrap: str, request: pytest.FixtureRequest) -> MakeTopic:
    """make_topic(partitions=1, config=None, name=None) -> the name of a freshly created topic."""
    slug = _slug(request)

    def create(partitions: int = 1, config: dict[str, str] | None = None, name: str | None = None) -> str:
        topic = name or f"t.{slug}.{uuid.uuid4().hex[:8]}"
        ensure_topic(kafka_bootstrap, topic, partitions, config)
        return topic

    return create


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses; NOT created (auto-creation is off on our brokers)."""
    return f"t.{_slug(request)}.{uuid.uuid4().hex[:8]}"


@pytest.fixture
def unique_group(request: pytest.FixtureRequest) -> str:
    """A consumer group id no other test uses."""
    return f"g.{_slug(request)}.{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    external = os.environ.get("OLSTREAM_PG_URL")
    if external:
        yield external
        return
    _stop_services_on_sigterm()
    data_dir = _private_tmpdir("olstream-pg-")
    state = None
    try:
        for attempt in range(3):
            try:
                state, _ = postgres.start_server(PostgresSettings(port=free_port(), data_dir=data_dir))
                break
            except InfrastructureError as e:
                if "already in use" not in str(e) or attempt == 2:
                    raise
        assert state is not None
        os.environ["OLSTREAM_PG_URL"] = state.url
        yield state.url
    finally:
        os.environ.pop("OLSTREAM_PG_URL", None)
        postgres.stop_server(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database for this test (a superuser owns it); dropped afterwards."""
    url = postgres.create_test_database(postgres_server)
    yield url
    postgres.drop_database(url)
