"""A composite transport: one sink per member (`--transport NAME`), each with its own group and DLQ."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from olstream.cli.main import main as olstream_main
from olstream.connectors.sink.settings import SinkSettings, build_settings
from olstream.shared import logs
from olstream.shared.errors import ConfigError

T = "OPENLINEAGE__TRANSPORT__"
KEY = "k3y-of-default-http-9f"
MEMBERS = {
    "marquez": {"type": "http", "url": "http://marquez:5000", "compression": "gzip"},
    "audit": {"type": "file", "log_file_path": "/var/lineage/audit.ndjson"},
    "screen": {"type": "console"},
}


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(logs, "_SECRETS", set())
    for name in list(os.environ):
        if name.startswith(("OPENLINEAGE", "OLSTREAM_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def composite(tmp_path: Path, transports: Any, **extra: Any) -> dict[str, str]:
    path = tmp_path / "openlineage.yml"
    path.write_text(json.dumps({"transport": {"type": "composite", "transports": transports, **extra}}))
    return {"OPENLINEAGE_CONFIG": str(path)}


def settings_for(flags: dict[str, Any], env: dict[str, str], tmp_path: Path) -> SinkSettings:
    return build_settings(flags, env, cwd=tmp_path, home=tmp_path / "home")


def python_member_names(env: dict[str, str], tmp_path: Path) -> list[str | None]:
    """The members openlineage-python's own client builds from the same environment."""
    from openlineage.client import OpenLineageClient

    with mock.patch.dict(os.environ, {**env, "HOME": str(tmp_path)}, clear=True):
        transport = OpenLineageClient().transport
    assert transport.kind == "composite"
    return [t.name for t in transport.transports]  # type: ignore[attr-defined]


@pytest.mark.parametrize("form", ["map", "list"])
def test_each_member_runs_as_its_own_sink_with_its_own_group_and_dlq(form: str, tmp_path: Path) -> None:
    transports: Any = MEMBERS if form == "map" else [{"name": n, **m} for n, m in MEMBERS.items()]
    env = composite(tmp_path, transports, continue_on_failure=True)
    assert python_member_names(env, tmp_path) == list(MEMBERS)
    marquez = settings_for({"transport_name": "marquez"}, env, tmp_path)
    assert (marquez.transport, marquez.url, marquez.compression) == (
        "http",
        "http://marquez:5000/api/v1/lineage",
        "gzip",
    )
    assert (marquez.group, marquez.dlq_topic) == ("olstream-sink.marquez", "openlineage.events.dlq.marquez")
    assert dict(marquez.sources)["transport"] == f"file {env['OPENLINEAGE_CONFIG']}, member marquez"
    assert marquez.destination == "http://marquez:5000/api/v1/lineage (transport marquez)"
    audit = settings_for({}, env | {"OLSTREAM_SINK_TRANSPORT": "audit"}, tmp_path)
    assert (audit.transport, audit.file_path, audit.group) == (
        "file",
        "/var/lineage/audit.ndjson",
        "olstream-sink.audit",
    )
    assert settings_for({"transport_name": "screen"}, env, tmp_path).transport == "console"


def test_several_members_without_transport_is_an_error_naming_them_and_the_commands(tmp_path: Path) -> None:
    env = composite(tmp_path, MEMBERS)
    with pytest.raises(ConfigError) as caught:
        settings_for({}, env, tmp_path)
    text = str(caught.value)
    assert "3 members (marquez, audit, screen)" in text
    assert "`olstream sink --transport marquez`" in text and "`olstream sink --transport screen`" in text


def test_the_only_member_runs_with_its_own_group(tmp_path: Path) -> None:
    env = composite(tmp_path, {"marquez": MEMBERS["marquez"]})
    s = settings_for({}, env, tmp_path)
    assert (s.transport_name, s.group, s.dlq_topic) == (
        "marquez",
        "olstream-sink.marquez",
        "openlineage.events.dlq.marquez",
    )
    assert dict(s.sources)["transport_name"].startswith("the only member")


def test_explicit_group_and_dlq_flags_are_taken_as_given_the_environment_is_a_base(tmp_path: Path) -> None:
    env = composite(tmp_path, MEMBERS) | {
        "OLSTREAM_SINK_GROUP": "prod",
        "OLSTREAM_SINK_DLQ_TOPIC": "prod.dlq",
    }
    flagged = settings_for(
        {"transport_name": "marquez", "group": "mine", "dlq_topic": "mine.dlq"}, env, tmp_path
    )
    assert (flagged.group, flagged.dlq_topic) == ("mine", "mine.dlq")
    # A shared environment (one ConfigMap, one compose file) must not put two receivers in one group.
    shared = settings_for({"transport_name": "marquez"}, env, tmp_path)
    assert (shared.group, shared.dlq_topic) == ("prod.marquez", "prod.dlq.marquez")
    assert dict(shared.sources)["group"] == "env OLSTREAM_SINK_GROUP + .marquez (--transport)"


def test_openlineage_url_is_the_member_default_http_as_in_openlineage_python(tmp_path: Path) -> None:
    env = composite(tmp_path, {"marquez": MEMBERS["marquez"]})
    env |= {"OPENLINEAGE_URL": "http://flat:1", "OPENLINEAGE_ENDPOINT": "ep", "OPENLINEAGE_API_KEY": KEY}
    assert sorted(n or "" for n in python_member_names(env, tmp_path)) == ["default_http", "marquez"]
    flat = settings_for({"transport_name": "default_http"}, env, tmp_path)
    assert (flat.url, flat.api_key, flat.group) == ("http://flat:1/ep", KEY, "olstream-sink.default_http")
    assert dict(flat.sources)["api_key"] == "env OPENLINEAGE_API_KEY"
    marquez = settings_for({"transport_name": "marquez"}, env, tmp_path)
    assert (
        marquez.api_key is None and marquez.url == "http://marquez:5000/api/v1/lineage"
    )  # no flat key leaks
    with pytest.raises(ConfigError, match="2 members"):
        settings_for({}, env, tmp_path)
    # a variable configuring default_http itself: no alias (openlineage-python's rule)
    env[T + "TRANSPORTS__DEFAULT_HTTP__URL"] = "http://nested:2"
    env[T + "TRANSPORTS__DEFAULT_HTTP__TYPE"] = "http"
    nested = settings_for({"transport_name": "default_http"}, env, tmp_path)
    assert (nested.url, nested.api_key) == ("http://nested:2/api/v1/lineage", None)


def test_members_from_variables_merge_over_the_file_and_may_be_new(tmp_path: Path) -> None:
    env = composite(tmp_path, {"marquez": MEMBERS["marquez"]})
    env |= {
        T + "TRANSPORTS__MARQUEZ__AUTH__TYPE": "api_key",
        T + "TRANSPORTS__MARQUEZ__AUTH__APIKEY": KEY,
        T + "TRANSPORTS__MARQUEZ__CUSTOM_HEADERS__X_ORG": "acme-org",
        T + "TRANSPORTS__BACKUP__TYPE": "http",
        T + "TRANSPORTS__BACKUP__URL": "http://backup:1",
    }
    marquez = settings_for({"transport_name": "marquez"}, env, tmp_path)
    assert (marquez.url, marquez.api_key, marquez.compression) == (
        "http://marquez:5000/api/v1/lineage",
        KEY,
        "gzip",
    )
    assert marquez.headers == (("x_org", "acme-org"),)
    assert dict(marquez.sources)["api_key"] == f"env {T}TRANSPORTS__MARQUEZ__AUTH__APIKEY"
    backup = settings_for({"transport_name": "backup"}, env, tmp_path)
    assert backup.url == "http://backup:1/api/v1/lineage" and backup.group == "olstream-sink.backup"


def test_a_composite_from_the_variables_alone(tmp_path: Path) -> None:
    env = {
        T + "TYPE": "composite",
        T + "TRANSPORTS": json.dumps([{"name": "one", "type": "http", "url": "http://one:1"}]),
    }
    assert python_member_names(env, tmp_path) == ["one"]
    s = settings_for({}, env, tmp_path)
    assert (s.transport_name, s.url) == ("one", "http://one:1/api/v1/lineage")
    assert dict(s.sources)["url"] == f"env {T}TRANSPORTS"


@pytest.mark.parametrize(
    ("transports", "flags", "message"),
    [
        (MEMBERS, {"transport_name": "nope"}, r"no such member \(marquez, audit, screen\)"),
        ({"inner": {"type": "composite", "transports": {}}}, {}, "itself composite"),
        ({"k": {"type": "kafka", "topic": "x"}}, {}, "type 'kafka'.*does not support"),
        ([{"type": "http", "url": "http://a:1"}], {}, "has no name"),
        ([{"name": "a", "type": "console"}, {"name": "a", "type": "console"}], {}, "two members named 'a'"),
        ({"a/b": {"type": "console"}}, {}, "must be letters, digits"),
        ({}, {}, "has no members"),
        ("marquez", {}, "must be a list or a map"),
        (MEMBERS, {"transport_name": "marquez", "url": "http://x:1"}, "--url names the destination itself"),
        (MEMBERS, {"transport_name": "marquez", "console": True}, "--console names the destination itself"),
    ],
)
def test_composite_errors(transports: Any, flags: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_for(flags, composite(tmp_path, transports), tmp_path)


def test_an_unsupported_member_does_not_stop_the_others(tmp_path: Path) -> None:
    env = composite(tmp_path, {**MEMBERS, "stream": {"type": "kafka", "topic": "x"}})
    assert settings_for({"transport_name": "marquez"}, env, tmp_path).transport == "http"


def test_transport_names_a_member_only_of_a_composite(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"the transport is http \(from env OPENLINEAGE_URL"):
        settings_for({"transport_name": "marquez"}, {"OPENLINEAGE_URL": "http://m:1"}, tmp_path)
    assert (
        settings_for({"url": "http://x:1"}, composite(tmp_path, MEMBERS), tmp_path).group == "olstream-sink"
    )


def test_print_config_shows_the_member_its_group_and_dlq(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in composite(tmp_path, MEMBERS).items():
        monkeypatch.setenv(name, value)
    assert olstream_main(["sink", "--transport", "audit", "--print-config"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["transport"], doc["transport_name"], doc["group"]) == ("file", "audit", "olstream-sink.audit")
    assert doc["sources"]["transport_name"] == "flag"
    assert olstream_main(["sink", "--print-config"]) == 2
    assert "run one sink per receiver" in capsys.readouterr().err


def test_continue_on_success_false_is_a_warning_every_member_gets_every_event(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = composite(tmp_path, MEMBERS, continue_on_success=False)
    with caplog.at_level("WARNING"):
        assert settings_for({"transport_name": "marquez"}, env, tmp_path).transport_name == "marquez"
    assert "continue_on_success: false" in caplog.text
