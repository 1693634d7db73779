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
    path.write_text(
        "bootstrap: top:1\nsource:\n  bootstrap: section:1\n  batch-size: 5\nworker:\n  batch_size: 99\n"
    )
    shared = (Setting("bootstrap", "d:1", "brokers", shared=True), Setting("batch_size", 1, "n", parse=int))
    r = resolve("source", shared, {"config": str(path)}, {})
    assert (r["bootstrap"], r["batch_size"]) == ("section:1", 5)
    assert r.origins["bootstrap"] == f"file {path}"
    via_env = resolve("worker", shared, {}, {"OLSTREAM_CONFIG": str(path)})
    assert (via_env["bootstrap"], via_env["batch_size"]) == ("top:1", 99)


def test_a_top_level_key_that_not_every_command_shares_is_refused(tmp_path: Path) -> None:
    """`batch_size` is rows per read for the source and records per batch for the worker: no guess."""
    path = tmp_path / "olstream.yml"
    path.write_text("bootstrap: k:1\nbatch_size: 10\n")
    with pytest.raises(ConfigError, match="top-level key `batch_size` is not a setting every command shares"):
        resolve("worker", SETTINGS, {"config": str(path)}, {})
    path.write_text("marquez: true\n")
    with pytest.raises(ConfigError, match="`marquez` is the section of `olstream marquez`"):
        resolve("demo", SETTINGS, {"config": str(path)}, {})


def test_only_shared_settings_take_the_top_level(tmp_path: Path) -> None:
    path = tmp_path / "olstream.yml"
    path.write_text("log_level: debug\nx: {}\n")
    mine = (
        Setting("log_level", "INFO", "level", parse=str.upper),
        Setting("log_format", "text", "f", shared=True),
    )
    r = resolve("x", mine, {"config": str(path)}, {})
    assert r["log_level"] == "INFO"  # not declared shared here: the top level does not reach it


def test_the_named_file_comes_before_more_files(tmp_path: Path) -> None:
    path = tmp_path / "olstream.yml"
    path.write_text("x:\n  batch_size: 7\n")
    more = FileLayer({"batch_size": 3, "mode": "b"}, "file openlineage.yml")
    r = resolve("x", SETTINGS, {"config": str(path)}, {}, (more,))
    assert (r["batch_size"], r["mode"]) == (7, "b")
    assert r.origins["mode"] == "file openlineage.yml"


def test_an_empty_flag_counts_as_not_given() -> None:
    r = resolve("x", SETTINGS, {"bootstrap": ""}, {"OLSTREAM_BOOTSTRAP": "env:1"})
    assert r["bootstrap"] == "env:1"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["a"], "expected a string"),
        (True, "expected a string"),
        ({"a": "b"}, "expected a string"),
    ],
)
def test_a_yaml_value_of_the_wrong_kind_is_refused(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve("x", SETTINGS, {}, {}, (FileLayer({"bootstrap": value}, "file f.yml"),))


@pytest.mark.parametrize("value", [3.7, "inf", True, [1]])
def test_a_number_setting_refuses_what_is_not_its_number(value: object) -> None:
    numbers = (Setting("n", 1, "n", parse=int), Setting("f", 1.0, "f", parse=float))
    with pytest.raises(ConfigError, match="expected"):
        resolve("x", numbers, {}, {}, (FileLayer({"n": value, "f": 1.0}, "file f.yml"),))
    if value != 3.7:
        with pytest.raises(ConfigError, match="expected a"):
            resolve("x", numbers, {}, {}, (FileLayer({"f": value}, "file f.yml"),))
    assert resolve("x", numbers, {}, {}, (FileLayer({"n": 4.0, "f": 2}, "f"),)).values == {"n": 4, "f": 2.0}


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
    assert "hunter2" not in printed and "pw@" not in printed and "postgresql://***@h/db" in printed


def test_redact_url_keeps_everything_but_the_user_info() -> None:
    assert redact_url("http://user:s3cret@host:80/p?q=1") == "http://***@host:80/p?q=1"
    assert (
        redact_url("postgresql://h/db?password=pg2&sslmode=require")
        == "postgresql://h/db?password=***&sslmode=require"
    )
    assert redact_url("http://host/p") == "http://host/p"
    assert redact_url(5) == 5


def test_a_file_that_is_not_a_mapping_or_missing_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "list.yml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        read_file(str(path), "x")
    with pytest.raises(ConfigError, match="cannot read"):
        read_file(str(tmp_path / "absent.yml"), "x")
    with pytest.raises(ConfigError, match="cannot read"):
        read_file(str(tmp_path), "x")
    latin = tmp_path / "latin.yml"
    latin.write_bytes("bootstrap: k\xf6ln:1\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_file(str(latin), "x")
