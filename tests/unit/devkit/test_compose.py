"""docker-compose.yml and the Dockerfile, checked by reading them (Docker cannot run here)."""

from __future__ import annotations

import base64
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from olstream.cli.reference import COMMAND_SETTINGS
from olstream.shared.config import CONFIG_FILE
from tests.support.paths import REPO as ROOT

OLSTREAM_SERVICES = ("source", "worker", "sink")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def _services(compose: dict[str, Any]) -> dict[str, Any]:
    services = compose["services"]
    assert isinstance(services, dict)
    return services


def _depends(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {d: "service_started" for d in deps}
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def test_every_service_is_there_with_its_image(compose: dict[str, Any]) -> None:
    s = _services(compose)
    assert {"kafka", "postgres", "marquez", "marquez-web", *OLSTREAM_SERVICES} <= set(s)
    assert s["kafka"]["image"].startswith("apache/kafka:")
    assert s["postgres"]["image"].startswith("postgres:")
    assert s["marquez"]["image"].startswith("marquezproject/marquez:")
    assert s["marquez-web"]["image"].startswith("marquezproject/marquez-web:")
    # API and web UI of the same release
    assert s["marquez"]["image"].split(":")[1] == s["marquez-web"]["image"].split(":")[1]
    for name in OLSTREAM_SERVICES:
        assert s[name]["image"] == "olstream:latest"
        assert s[name]["build"] == "."
        assert s[name]["command"][0] == name


def test_kafka_runs_kraft_without_zookeeper(compose: dict[str, Any]) -> None:
    env = _services(compose)["kafka"]["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert not any("ZOOKEEPER" in key for key in env)
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    # a KRaft cluster id is 16 bytes, base64url without padding (22 characters)
    cluster_id = env["CLUSTER_ID"]
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16 and len(cluster_id) == 22


def test_dependencies_wait_for_healthy_services(compose: dict[str, Any]) -> None:
    s = _services(compose)
    expected = {
        "marquez": {"postgres"},
        "marquez-web": {"marquez"},
        "source": {"kafka", "eventlog-db"},
        "worker": {"kafka"},
        "sink": {"kafka", "marquez"},
    }
    for name, deps in expected.items():
        got = _depends(s[name])
        assert deps <= set(got), name
        for dep in deps:
            assert "healthcheck" in s[dep], dep
            assert got[dep] == "service_healthy", (name, dep)


def test_workers_scale_to_two_replicas_without_fixed_names(compose: dict[str, Any]) -> None:
    worker = _services(compose)["worker"]
    assert worker["deploy"]["replicas"] == 2
    assert "container_name" not in worker
    assert "ports" not in worker


def test_pipeline_environment_points_at_kafka_and_marquez(compose: dict[str, Any]) -> None:
    s = _services(compose)
    for name in OLSTREAM_SERVICES:
        assert s[name]["environment"]["OLSTREAM_KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert s["source"]["environment"]["OLSTREAM_LOG_URL"].startswith("postgresql://")
    assert "@eventlog-db:5432/" in s["source"]["environment"]["OLSTREAM_LOG_URL"]
    port = s["marquez"]["environment"]["MARQUEZ_PORT"]
    assert s["sink"]["environment"]["OPENLINEAGE_URL"] == f"http://marquez:{port}"
    assert s["marquez-web"]["environment"]["MARQUEZ_HOST"] == "marquez"
    assert s["marquez-web"]["environment"]["MARQUEZ_PORT"] == port
    # the sink, source and workers agree on topic names
    assert (
        s["source"]["environment"]["OLSTREAM_RECORDS_TOPIC"]
        == s["worker"]["environment"]["OLSTREAM_RECORDS_TOPIC"]
    )
    assert (
        s["worker"]["environment"]["OLSTREAM_EVENTS_TOPIC"]
        == s["sink"]["environment"]["OLSTREAM_EVENTS_TOPIC"]
    )


def test_marquez_uses_the_postgres_service_credentials(compose: dict[str, Any]) -> None:
    s = _services(compose)
    mq, pg = s["marquez"]["environment"], s["postgres"]["environment"]
    assert mq["POSTGRES_HOST"] == "postgres"
    assert (mq["POSTGRES_USER"], mq["POSTGRES_PASSWORD"], mq["POSTGRES_DB"]) == (
        pg["POSTGRES_USER"],
        pg["POSTGRES_PASSWORD"],
        pg["POSTGRES_DB"],
    )
    mount = next(v for v in s["marquez"]["volumes"] if v.endswith(":ro"))
    host_path, container_path, _ = mount.split(":")
    assert container_path == mq["MARQUEZ_CONFIG"]
    config_text = (ROOT / host_path).read_text(encoding="utf-8")
    config = yaml.safe_load(config_text)
    assert config["search"] == {"enabled": False}
    assert config["server"]["applicationConnectors"][0]["httpCompliance"] == "RFC7230_LEGACY"
    for var in set(re.findall(r"\$\{([A-Z_]+)", config_text)):
        assert var in mq, f"{host_path} uses ${{{var}}} that the marquez service does not set"


def test_olstream_environment_keys_are_read_by_the_commands(compose: dict[str, Any]) -> None:
    """Each OLSTREAM_* key a service sets is the variable of a setting its own command declares."""
    sink_code = (ROOT / "connectors" / "sink" / "settings.py").read_text(encoding="utf-8")
    for name in (*OLSTREAM_SERVICES, "simulate"):
        service = _services(compose).get(name)
        if service is None:
            continue
        command = service["command"]
        declared = COMMAND_SETTINGS["simulate" if command[0] == "log" else command[0]]
        names = {s.env_name for s in declared} | {CONFIG_FILE.env_name}
        for key in service.get("environment", {}):
            if key.startswith("OPENLINEAGE_"):
                assert command[0] == "sink" and f'"{key}"' in sink_code, f"{name}: nothing reads {key}"
            else:
                assert key in names, f"{name}: `olstream {' '.join(command[:2])}` declares no setting {key}"


def test_healthchecks_use_the_metrics_port_of_the_command(compose: dict[str, Any]) -> None:
    for name in OLSTREAM_SERVICES:
        service = _services(compose)[name]
        command = service["command"]
        port = command[command.index("--metrics-port") + 1]
        assert f":{port}/healthz" in " ".join(service["healthcheck"]["test"])


def _symlink_targets(package: Path) -> set[str]:
    """The top-level folders the package's symlinks point at (connectors, streams, avro)."""
    targets = set()
    for root, dirs, _files in os.walk(package):
        for d in dirs:
            link = Path(root) / d
            if link.is_symlink():
                targets.add(link.resolve().relative_to(ROOT).parts[0])
    return targets


def test_dockerfile_installs_every_package_and_runs_olstream() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11", text, re.M)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    for package in wheel["packages"]:
        assert re.search(rf"^COPY {package} ", text, re.M), package
    # the package's symlinks point at these folders, and the wheel force-includes these files:
    # the image must hold them all, or `pip install .` fails or installs a package without them
    for folder in _symlink_targets(ROOT / "olstream"):
        assert re.search(rf"^COPY {folder} ", text, re.M), folder
    for included in wheel.get("force-include", {}):
        assert re.search(rf"^COPY {re.escape(included)} ", text, re.M), included
    assert re.search(r"^COPY avro ", text, re.M)
    assert 'ENTRYPOINT ["olstream"]' in text
    assert re.search(r"^USER ", text, re.M)
    # the image carries the runtime only: `pip install .`, no `[local]` extra, no Graphviz
    assert re.search(r"^RUN pip install \.$", text, re.M)
    assert "[local]" not in re.sub(r"#.*", "", text) and "apt-get install" not in text


def test_the_image_serves_metrics_on_every_interface() -> None:
    """The metrics endpoint binds 127.0.0.1 by default; in a container that serves nothing outside."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^ENV OLSTREAM_METRICS_HOST=0\.0\.0\.0$", text, re.M)


@pytest.fixture(scope="module")
def production() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "docker-compose.production.yml").read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def test_the_production_variant_reads_kafka_security_from_a_secret_and_replicates_3_times(
    production: dict[str, Any],
) -> None:
    s = _services(production)
    assert set(s) == set(OLSTREAM_SERVICES)
    secrets = production["secrets"]
    for name in OLSTREAM_SERVICES:
        env = s[name]["environment"]
        assert env["OLSTREAM_REPLICATION_FACTOR"] == "3" and env["OLSTREAM_MIN_INSYNC_REPLICAS"] == "2"
        path = env["OLSTREAM_KAFKA_CONFIG"]
        assert path.startswith("/run/secrets/") and path.rsplit("/", 1)[1] in s[name]["secrets"]
        assert "kafka-ca.pem" in s[name]["secrets"]
        assert len(env["OLSTREAM_KAFKA_BOOTSTRAP"].split(",")) == 3
        # no secret in the file itself: passwords live in the mounted secrets and the env file
        assert not any("PASSWORD" in key or "API_KEY" in key for key in env), name
    assert set(secrets) >= {"kafka-client.properties", "kafka-ca.pem"}
    text = (ROOT / "docker-compose.production.yml").read_text(encoding="utf-8")
    assert "ssl.ca.location=/run/secrets/kafka-ca.pem" in text and "security.protocol=SASL_SSL" in text
    assert (
        s["worker"]["environment"]["OLSTREAM_RECORDS_TOPIC"]
        == s["source"]["environment"]["OLSTREAM_RECORDS_TOPIC"]
    )
    assert (
        s["sink"]["environment"]["OLSTREAM_EVENTS_TOPIC"]
        == s["worker"]["environment"]["OLSTREAM_EVENTS_TOPIC"]
    )


def test_the_production_variant_sets_only_variables_the_commands_read(production: dict[str, Any]) -> None:
    test_olstream_environment_keys_are_read_by_the_commands(production)
