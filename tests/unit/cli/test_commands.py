"""Every service command: one resolver, --print-config, and an invalid setting as one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from olstream.cli.main import main as olstream_main
from olstream.cli.reference import COMMAND_SETTINGS, render, render_exit_codes
from olstream.connectors.sink.settings import build_settings
from olstream.shared.errors import EXIT_MEANINGS, ExitCode
from tests.support.paths import REPO

COMMANDS = {
    "source": ["source", "--log", "sqlite:///nowhere.db"],
    "worker": ["worker"],
    "sink": ["sink", "--url", "http://receiver:5000"],
    "simulate": ["log", "simulate", "--log", "sqlite:///nowhere.db", "--runs", "1"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_print_config_shows_every_declared_setting_and_where_it_came_from(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLSTREAM_LOG_LEVEL", "debug")
    assert olstream_main([*COMMANDS[command], "--print-config"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    for setting in COMMAND_SETTINGS[command]:
        assert setting.key in doc["sources"], setting.key
    assert doc["log_level"] == "DEBUG" and doc["sources"]["log_level"] == "env OLSTREAM_LOG_LEVEL"


INFRA_COMMANDS = {
    "kafka up": ["kafka", "up"],
    "kafka down": ["kafka", "down"],
    "postgres up": ["postgres", "up"],
    "marquez": ["marquez", "up"],  # --print-config and a refused setting return before anything starts
    "demo": ["demo"],
    "status": ["status"],
}


@pytest.mark.parametrize("command", sorted(INFRA_COMMANDS))
def test_every_infrastructure_command_prints_its_config(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OLSTREAM_LOCAL_KAFKA_DATA_DIR", str(tmp_path))
    assert olstream_main([*INFRA_COMMANDS[command], "--print-config"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    if command.startswith("kafka"):
        assert (
            doc["data_dir"] == str(tmp_path)
            and doc["sources"]["data_dir"] == "env OLSTREAM_LOCAL_KAFKA_DATA_DIR"
        )


@pytest.mark.parametrize(
    ("command", "flag", "value"),
    [
        ("source", "--batch-size", "0"),
        ("worker", "--batch-size", "many"),
        ("sink", "--concurrency", "lots"),
        ("simulate", "--seed", "x"),
        ("kafka up", "--port", "x"),
        ("postgres up", "--start-timeout", "-1"),
        ("marquez", "--port", "0"),
        ("demo", "--runs", "0"),
        ("status", "--wait", "soon"),
    ],
)
def test_an_invalid_setting_is_one_line_and_exit_2(
    command: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = COMMANDS.get(command) or INFRA_COMMANDS[command]
    assert olstream_main([*argv, flag, value]) == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{flag}" in err and repr(value) in err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_configuration_file_is_one_line_and_exit_2(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yml"
    path.write_text("log_level: [not, a, level\n")
    assert olstream_main([*COMMANDS[command], "--config", str(path)]) == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(path) in err


def test_the_sink_prints_no_password_of_its_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        olstream_main(["sink", "--url", "http://user:s3cret@receiver:5000", "--print-config"]) == ExitCode.OK
    )
    printed = capsys.readouterr().out
    # the URL's user name appears nowhere (the word does, in the kafka_sasl_username setting's name)
    assert "s3cret" not in printed and "//user" not in printed and "user:" not in printed
    assert "http://***@receiver:5000/api/v1/lineage" in printed


def test_the_sink_reads_the_shared_olstream_settings(tmp_path: Path) -> None:
    env = {"OPENLINEAGE_URL": "http://m:5000", "OLSTREAM_LOG_FORMAT": "json", "OLSTREAM_METRICS_PORT": "9100"}
    s = build_settings({}, env, cwd=tmp_path, home=tmp_path)
    assert (s.log_format, s.metrics_port) == ("json", 9100)
    assert dict(s.sources)["metrics_port"] == "env OLSTREAM_METRICS_PORT"


def test_the_exit_code_table_of_the_docs_is_generated_from_the_code() -> None:
    page = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    assert render_exit_codes() in page, "docs/operations.md: python -m olstream.cli.reference --exit-codes"
    assert all(code in EXIT_MEANINGS for code in ExitCode)


def test_the_configuration_page_is_generated_from_the_declarations() -> None:
    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page == render(), (
        "docs/configuration.md is stale: python -m olstream.cli.reference > docs/configuration.md"
    )


def test_the_command_line_registers_no_service_metrics() -> None:
    """Every service builds the whole parser (every command module): a module that imports another
    service's code at import time would make every process export that service's metrics (the
    source and the worker exporting `olstream_sink_circuit_open`, say, breaks the alert rules; the
    sink and the worker exporting the source's counters doubles the dashboard's series)."""
    code = (
        "from olstream.cli.main import build_parser\n"
        "from prometheus_client import REGISTRY\n"
        "build_parser()\n"
        "print(' '.join(sorted(m.name for m in REGISTRY.collect() if m.name.startswith('olstream_'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # olstream_build_info and olstream_healthy are every service's own (olstream.shared.metrics); the
    # rest belong to one service
    assert out.split() == ["olstream_build_info", "olstream_healthy"], out


def test_errors_list_and_explain_take_the_pipelines_error_topics_from_the_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the Helm chart renders: `errors: topics` (every error topic of the release) and
    `explain: dlq_topic` (every receiver's DLQ), comma-separated."""
    config = tmp_path / "olstream.yml"
    config.write_text(
        "errors:\n  topics: olstream.eventlog.errors,olstream.stream.errors,dlq.marquez,dlq.audit\n"
        "explain:\n  dlq_topic: dlq.marquez, dlq.audit\n"
    )
    assert olstream_main(["errors", "list", "--config", str(config), "--print-config"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["topics"] == ["olstream.eventlog.errors", "olstream.stream.errors", "dlq.marquez", "dlq.audit"]
    assert doc["sources"]["topics"] == f"file {config}"
    assert olstream_main(["explain", "r1", "--config", str(config), "--print-config"]) == ExitCode.OK
    assert json.loads(capsys.readouterr().out)["dlq_topic"] == ["dlq.marquez", "dlq.audit"]
    assert olstream_main(["explain", "r1", "--print-config"]) == ExitCode.OK  # the sink's default DLQ
    assert json.loads(capsys.readouterr().out)["dlq_topic"] == ["openlineage.events.dlq"]
