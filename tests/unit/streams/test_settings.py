"""`olstream worker` settings: flags win over OLSTREAM_* env, which wins over defaults."""

from __future__ import annotations

import pytest

from olstream.cli.main import build_parser
from olstream.shared.errors import ConfigError
from olstream.streams.mapping import DEFAULT_PRODUCER
from tests.support.cli_settings import build_settings


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["worker", *argv])


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KAFKA_BOOTSTRAP", "APP_ID", "WORKER_DATA_DIR", "WORKER_RETENTION", "WORKER_JOB_PREFIX"):
        monkeypatch.delenv(f"OLSTREAM_{name}", raising=False)
    s = build_settings(parse())
    assert s.input_topic == "olstream.eventlog" and s.output_topic == "openlineage.events"
    assert s.errors_topic == "olstream.stream.errors"
    assert s.retention_ms == 3_600_000 and not s.until_idle
    assert s.mapping.producer == DEFAULT_PRODUCER and s.mapping.job_prefix == ""


def test_env_then_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLSTREAM_KAFKA_BOOTSTRAP", "envhost:1")
    monkeypatch.setenv("OLSTREAM_WORKER_JOB_PREFIX", "env.")
    monkeypatch.setenv("OLSTREAM_WORKER_RETENTION", "60")
    s = build_settings(parse("--job-prefix", "flag.", "--until-idle", "--app-id", "a1"))
    assert s.bootstrap == "envhost:1" and s.mapping.job_prefix == "flag."
    assert s.retention_ms == 60_000 and s.until_idle and s.app_id == "a1"


def test_invalid_number_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLSTREAM_WORKER_BATCH_SIZE", "many")
    with pytest.raises(ConfigError, match="invalid worker setting"):
        build_settings(parse())


def test_job_names_default_env_and_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLSTREAM_WORKER_JOB_NAMES", raising=False)
    assert build_settings(parse()).mapping.job_names == "hierarchical"
    monkeypatch.setenv("OLSTREAM_WORKER_JOB_NAMES", "flat")
    assert build_settings(parse()).mapping.job_names == "flat"
    assert build_settings(parse("--job-names", "hierarchical")).mapping.job_names == "hierarchical"
    monkeypatch.setenv("OLSTREAM_WORKER_JOB_NAMES", "dotted")
    with pytest.raises(ConfigError, match="job names must be one of hierarchical, flat"):
        build_settings(parse())
