"""The whole pipeline over a SASL_SSL listener with SCRAM-SHA-512 and hostname verification; a wrong
password and an untrusted CA are one clear line and exit 77 (KAFKA_REFUSED) for every service."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from olstream.shared.errors import ExitCode
from olstream.shared.kafka_settings import read_properties
from tests.support.pipeline_support import (
    GrowingLog,
    LocalCluster,
    Pipeline,
    assert_complete_identical_and_ordered,
    local_cluster,
    missing_events,
)
from tests.support.stream_support import OLSTREAM, env

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("secured") / "kafka", security="sasl_ssl") as cluster:
        yield cluster


def _properties(cluster: LocalCluster) -> Path:
    path = cluster.state.client_properties
    assert path is not None and path.is_file()
    return path


def _variant(cluster: LocalCluster, tmp_path: Path, **changes: str) -> Path:
    props = read_properties(str(_properties(cluster)))
    props.update(changes)
    path = tmp_path / "client.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def test_the_pipeline_runs_over_sasl_ssl_with_scram(secured: LocalCluster, tmp_path: Path) -> None:
    props = read_properties(str(_properties(secured)))
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props.get("ssl.endpoint.identification.algorithm", "https") == "https"
    log = GrowingLog(tmp_path / "events.db")
    log.append(150)
    pipeline = Pipeline(
        tmp_path, secured.bootstrap, log.url, f"secured-{uuid.uuid4().hex[:8]}",
        extra=("--kafka-config", str(_properties(secured))), workers=1,
    )  # fmt: skip
    for name, cmd in pipeline.commands(until_idle=True).items():
        with pipeline.log(name).open("wb") as out:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env(), timeout=300).returncode
        assert rc == 0, f"{name} exited {rc}:\n{pipeline.log(name).read_text()[-3000:]}"
    starts, ends = log.expected()
    lines = pipeline.delivered()
    assert not missing_events(lines, starts, ends)
    assert_complete_identical_and_ordered(lines, starts, ends)
    password = props["sasl.password"]
    for name in pipeline.commands():
        assert password not in pipeline.log(name).read_text(errors="replace"), name


REFUSALS = {
    "wrong password": ({"sasl.password": "not-the-password"}, "authentication failed"),
    "untrusted CA": ({}, "TLS failed"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refused_connection_is_one_line_and_exit_77_for_every_service(
    secured: LocalCluster, tmp_path: Path, case: str
) -> None:
    changes, expected = REFUSALS[case]
    if case == "untrusted CA":
        assert secured.state.tls_dir is not None
        changes = {"ssl.ca.location": str(secured.state.tls_dir / "other-ca.pem")}
    bad = _variant(secured, tmp_path, **changes)
    name = f"refused-{uuid.uuid4().hex[:8]}"
    log = GrowingLog(tmp_path / "events.db")
    pipeline = Pipeline(
        tmp_path, secured.bootstrap, log.url, name, extra=("--kafka-config", str(bad)), workers=1
    )
    commands = pipeline.commands(until_idle=True)
    commands["status"] = [*OLSTREAM, "status", "--bootstrap", secured.bootstrap, "--kafka-config", str(bad)]
    for service, cmd in commands.items():
        done = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=120)
        output = done.stdout + done.stderr
        assert done.returncode == ExitCode.KAFKA_REFUSED, (
            f"{service}: exit {done.returncode}\n{output[-3000:]}"
        )
        errors = [line for line in output.splitlines() if "refused the connection" in line]
        assert len(errors) == 1 and expected in errors[0], f"{service}:\n{output[-3000:]}"
        assert "Traceback" not in output, f"{service}:\n{output[-3000:]}"
        assert "not-the-password" not in output, service
