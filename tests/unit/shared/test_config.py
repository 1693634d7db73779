"""The one configuration resolver: precedence, the file's sections, provenance, redaction, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from olstream.shared.config import (
    FileLayer,
    Setting,
    at_least,
    read_file,
    redact_url,
    resolve,
)
from olstream.shared.errors import ConfigError

SETTINGS = (
    Setting("bootstrap", "127.0.0.1:9092", "brokers"),
    Setting("batch_size", 10, "records", parse=int, check=at_least(1)),
    Setting("mode", "a", "mode", choices=("a", "b"), env="OLSTREAM_X_MODE"),
    Setting("until_idle", False, "stop", switch=True, env=""),
    Setting("password", None, "secret", secret=True),
)


def test_flag_beats_env_beats_file_beats_default() -> None:
    file = FileLayer({"bootstrap": "file:1", "batch_size": 30, "mode": "b"}, "file f.yml")
    env = {"OLSTREAM_BOOTSTRAP": "env:1", "OLSTREAM_BATCH_SIZE": "20"}
    r = resolve("x", SETTINGS, {"bootstrap": "flag:1"}, env, (file,))
    assert (r["bootstrap"], r["batch_size"], r["mode"], r["until_idle"]) == ("flag:1", 20, "b", False)
    assert dict(r.origins) == {
        "bootstrap": "flag",
        "batch_size": "env OLSTREAM_BATCH_SIZE",
        "mode": "file f.yml",
        "until_idle": "default",
        "password": "default",
    }


def test_an_empty_environment_variable_counts_as_unset() -> None:
    r = resolve("x", SETTINGS, {}, {"OLSTREAM_BOOTSTRAP": ""})
    assert r["bootstrap"] == "127.0.0.1:9092" and r.origins["bootstrap"] == "default"


def test_a_setting_without_a_variable_ignores_the_environment() -> None:
    r = resolve("x", SETTINGS, {}, {"OLSTREAM_UNTIL_IDLE": "true"})
    assert r["until_idle"] is False


def test_the_file_section_of_the_command_wins_over_its_top_level(tmp_path: Path) -> None:
    path = tmp_path / "olstream.yml"
    path.write_text("bootstrap: top:1\nbatch-size: 5\nx:\n  bootstrap: section:1\nother:\n  batch_size: 99\n")
    r = resolve("x", SETTINGS, {"config": str(path)}, {})
    assert (r["bootstrap"], r["batch_size"]) == ("section:1", 5)
    assert r.origins["bootstrap"] == f"file {path}"
    via_env = resolve("x", SETTINGS, {}, {"OLSTREAM_CONFIG": str(path)})
    assert via_env["bootstrap"] == "section:1"


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (
            {"batch_size": "many"},
            {},
            "invalid x setting batch_size 'many' (from flag --batch-size): expected an integer",
        ),
        (
            {},
            {"OLSTREAM_BATCH_SIZE": "0"},
            "batch_size '0' (from env OLSTREAM_BATCH_SIZE): must be at least 1",
        ),
        ({}, {"OLSTREAM_X_MODE": "c"}, "mode 'c' (from env OLSTREAM_X_MODE): mode must be one of a, b"),
        ({"until_idle": "maybe"}, {}, "until_idle 'maybe' (from flag --until-idle): expected true or false"),
    ],
)
def test_an_invalid_value_names_the_setting_the_value_and_where_it_came_from(
    flags: dict[str, str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve("x", SETTINGS, flags, env)
    assert message in str(caught.value)


def test_a_secret_is_never_in_an_error_or_the_printed_settings() -> None:
    bad = (Setting("password", None, "secret", parse=int, secret=True),)
    with pytest.raises(ConfigError) as caught:
        resolve("x", bad, {"password": "hunter2"}, {})
    assert "hunter2" not in str(caught.value)
    r = resolve("x", SETTINGS, {"password": "hunter2", "bootstrap": "postgresql://u:pw@h/db"}, {})
    printed = r.render()
    assert "hunter2" not in printed and ":pw@" not in printed and "postgresql://u:***@h/db" in printed


def test_redact_url_keeps_everything_but_the_password() -> None:
    assert redact_url("http://user:s3cret@host:80/p?q=1") == "http://user:***@host:80/p?q=1"
    assert redact_url("http://host/p") == "http://host/p"
    assert redact_url(5) == 5


def test_a_file_that_is_not_a_mapping_or_missing_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "list.yml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        read_file(str(path), "x")
    with pytest.raises(ConfigError, match="cannot read"):
        read_file(str(tmp_path / "absent.yml"), "x")
