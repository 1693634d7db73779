"""OpenLineage's nested variables (OPENLINEAGE__TRANSPORT__*), custom headers, compression and DISABLED.

The nested variables are compared with what openlineage-python itself reads from the same
environment, so "as openlineage-python reads them" is checked, not assumed.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from olstream.cli.main import main as olstream_main
from olstream.connectors.sink.openlineage_config import env_transport, is_disabled
from olstream.connectors.sink.settings import SinkSettings, build_settings
from olstream.shared import logs
from olstream.shared.errors import ConfigError
from olstream.shared.logs import setup_logging

KEY = "k3y-nested-0f-the-receiver-77"
ORG = "org-t0ken-a1b2c3"
T = "OPENLINEAGE__TRANSPORT__"


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(logs, "_SECRETS", set())
    for name in list(os.environ):
        if name.startswith(("OPENLINEAGE", "OLSTREAM_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def settings_for(flags: dict[str, Any], env: dict[str, str], tmp_path: Path) -> SinkSettings:
    return build_settings(flags, env, cwd=tmp_path, home=tmp_path / "home")


def write_yml(tmp_path: Path, transport: dict[str, Any]) -> str:
    path = tmp_path / "ol.yml"
    path.write_text(json.dumps({"transport": transport}))  # JSON is YAML
    return str(path)


def python_client_config(env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    """The `transport` openlineage-python's own loader reads from these variables alone."""
    from openlineage.client import OpenLineageClient

    with mock.patch.dict(os.environ, {**env, "HOME": str(tmp_path)}, clear=True):
        loaded = OpenLineageClient._load_config_from_env_variables() or {}
    transport: dict[str, Any] = loaded.get("transport", {})
    return transport


NESTED_CASES = {
    "http with api key": {
        T + "TYPE": "http",
        T + "URL": "http://m:5000",
        T + "ENDPOINT": "api/v1/lineage",
        T + "AUTH__TYPE": "api_key",
        T + "AUTH__APIKEY": KEY,
        T + "TIMEOUT": "7",
        T + "COMPRESSION": "gzip",
        T + "CUSTOM_HEADERS__X_ORG": ORG,
    },
    "json values": {
        T + "TYPE": "http",
        T + "URL": "http://m:5000",
        T + "VERIFY": "false",
        T + "CUSTOM_HEADERS": json.dumps({"X-Org": ORG, "X-Team": "lineage"}),
        T + "AUTH": json.dumps({"type": "api_key", "apiKey": KEY}),
    },
    "a shallower variable replaces deeper ones": {
        T + "AUTH": json.dumps({"type": "api_key", "apiKey": KEY}),
        T + "AUTH__APIKEY": "overridden-by-the-object",
        "OPENLINEAGE__TRANSPORT": json.dumps({"type": "http", "url": "http://whole:1"}),
        T + "COMPRESSION": "gzip",
    },
    "composite members": {
        T + "TYPE": "composite",
        T + "TRANSPORTS__MARQUEZ__TYPE": "http",
        T + "TRANSPORTS__MARQUEZ__URL": "http://m:5000",
        T + "TRANSPORTS__AUDIT__TYPE": "file",
        T + "TRANSPORTS__AUDIT__LOG_FILE_PATH": "/tmp/audit.ndjson",
    },
}


@pytest.mark.parametrize("case", sorted(NESTED_CASES))
def test_nested_variables_are_read_as_openlineage_python_reads_them(case: str, tmp_path: Path) -> None:
    env = NESTED_CASES[case]
    values, _names, _raws = env_transport(env)
    assert values == python_client_config(env, tmp_path)


def test_nested_http_settings_keys_lower_cased_and_their_sources(tmp_path: Path) -> None:
    s = settings_for({}, NESTED_CASES["http with api key"], tmp_path)
    assert (s.transport, s.url, s.api_key) == ("http", "http://m:5000/api/v1/lineage", KEY)
    assert (s.total_timeout, s.compression) == (7.0, "gzip")
    assert s.headers == (("x_org", ORG),)  # the header name openlineage-python sends: lower case, `_`
    sources = dict(s.sources)
    assert sources["url"] == f"env {T}URL" and sources["api_key"] == f"env {T}AUTH__APIKEY"
    assert sources["http_timeout"] == f"env {T}TIMEOUT" and sources["transport"] == f"env {T}TYPE"
    assert sources["custom_headers.x_org"] == f"env {T}CUSTOM_HEADERS__X_ORG"
    json_form = settings_for({}, NESTED_CASES["json values"], tmp_path)
    assert dict(json_form.headers) == {"X-Org": ORG, "X-Team": "lineage"} and json_form.api_key == KEY
    assert dict(json_form.sources)["api_key"] == f"env {T}AUTH"
    whole = settings_for({}, NESTED_CASES["a shallower variable replaces deeper ones"], tmp_path)
    assert (whole.url, whole.api_key, whole.compression) == ("http://whole:1/api/v1/lineage", None, None)


def test_flags_win_over_nested_over_flat_over_the_file(tmp_path: Path) -> None:
    yml = write_yml(
        tmp_path,
        {"type": "http", "url": "http://file:1", "endpoint": "file/ep", "auth": {"apiKey": "file-key"}},
    )
    env = {"OPENLINEAGE_CONFIG": yml}
    env |= {
        "OPENLINEAGE_URL": "http://flat:2",
        "OPENLINEAGE_ENDPOINT": "flat/ep",
        "OPENLINEAGE_API_KEY": "flat-key",
    }
    flat = settings_for({}, env, tmp_path)
    assert (flat.url, flat.api_key) == ("http://flat:2/flat/ep", "flat-key")
    env |= {T + "URL": "http://nested:3", T + "ENDPOINT": "nested/ep", T + "AUTH__APIKEY": "nested-key"}
    nested = settings_for({}, env, tmp_path)
    assert (nested.url, nested.api_key) == ("http://nested:3/nested/ep", "nested-key")
    assert dict(nested.sources)["endpoint"] == f"env {T}ENDPOINT"
    key_file = tmp_path / "key"
    key_file.write_text("flag-key\n")
    flags = {"url": "http://flag:4", "endpoint": "flag/ep", "api_key_file": str(key_file)}
    flagged = settings_for(flags, env, tmp_path)
    assert (flagged.url, flagged.api_key) == ("http://flag:4/flag/ep", "flag-key")


def test_nested_variables_merge_with_the_file_value_by_value(tmp_path: Path) -> None:
    """openlineage-python merges them too, but lets the file win; olstream keeps env > file."""
    yml = write_yml(
        tmp_path,
        {
            "type": "http",
            "url": "http://file:1",
            "timeout": 9,
            "custom_headers": {"X-Org": "file-org", "X-A": "aaaa"},
        },
    )
    env = {"OPENLINEAGE_CONFIG": yml, T + "COMPRESSION": "gzip", T + "CUSTOM_HEADERS__X-ORG": ORG}
    s = settings_for({}, env, tmp_path)
    assert (s.url, s.compression, s.total_timeout) == ("http://file:1/api/v1/lineage", "gzip", 9.0)
    assert dict(s.headers) == {"x-org": ORG, "X-A": "aaaa"}  # one X-Org: names are case-insensitive
    assert dict(s.sources)["custom_headers.X-A"] == f"file {yml}"


def test_a_nested_type_wins_over_openlineage_url_as_in_openlineage_python(tmp_path: Path) -> None:
    from openlineage.client import OpenLineageClient

    for env, kind, url in (
        ({T + "TYPE": "console", "OPENLINEAGE_URL": "http://flat:1"}, "console", None),
        (
            {T + "TYPE": "http", T + "URL": "http://nested:2", "OPENLINEAGE_URL": "http://flat:1"},
            "http",
            "nested",
        ),
        ({"OPENLINEAGE_URL": "http://flat:1", T + "COMPRESSION": "gzip"}, "http", "flat"),
    ):
        s = settings_for({}, env, tmp_path)
        with mock.patch.dict(os.environ, {**env, "HOME": str(tmp_path)}, clear=True):
            theirs = OpenLineageClient().transport
        assert s.transport == theirs.kind == kind
        if url:
            assert s.url is not None and url in s.url and url in theirs.url  # type: ignore[attr-defined]


def test_a_variable_keeps_its_text_where_a_string_is_meant(tmp_path: Path) -> None:
    env = {"OPENLINEAGE_URL": "http://m:1", T + "AUTH__APIKEY": "1e10", T + "CUSTOM_HEADERS__X_ID": "12345"}
    s = settings_for({}, env, tmp_path)
    assert s.api_key == "1e10" and s.headers == (("x_id", "12345"),)


def test_the_timeout_flag_beats_its_variable_which_beats_the_config_file_and_openlineage_yml(
    tmp_path: Path,
) -> None:
    (tmp_path / "olstream.yml").write_text("sink:\n  http_timeout: 4\n")
    yml = write_yml(tmp_path, {"type": "http", "url": "http://m:1", "timeout": 9})
    env = {"OPENLINEAGE_CONFIG": yml}
    assert settings_for({}, env, tmp_path).total_timeout == 9.0
    env["OLSTREAM_CONFIG"] = str(tmp_path / "olstream.yml")
    assert settings_for({}, env, tmp_path).total_timeout == 4.0  # the --config file over openlineage.yml
    env[T + "TIMEOUT"] = "2.5"
    assert settings_for({}, env, tmp_path).total_timeout == 2.5
    assert settings_for({"http_timeout": "1"}, env, tmp_path).total_timeout == 1.0
    env[T + "TIMEOUT"] = "-3"
    with pytest.raises(ConfigError, match=f"from env {T}TIMEOUT"):
        settings_for({}, env, tmp_path)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OPENLINEAGE__TRANSPORT": '"http"'}, "must be a JSON object"),
        ({"OPENLINEAGE__transport__auth": "x", T + "AUTH__TYPE": "api_key"}, "cannot be applied"),
        ({T + "TYPE": "kafka"}, "'kafka' .*not supported"),
        ({T + "URL": "http://m:1", T + "COMPRESSION": "deflate"}, "compression 'deflate'.*only one is gzip"),
        ({T + "URL": "http://m:1", T + "COMPRESSION": "GZIP"}, "compression 'GZIP'"),
        ({T + "URL": "http://m:1", T + "AUTH__TYPE": "jwt", T + "AUTH__APIKEY": KEY}, "auth.type 'jwt'"),
        ({T + "URL": "http://m:1", T + "AUTH__TYPE": "api_key"}, "needs auth.apiKey"),
        ({T + "URL": "http://m:1", T + "AUTH": "token"}, "auth .*must be a mapping"),
        ({T + "URL": "http://m:1", T + "CUSTOM_HEADERS": '"x"'}, "custom_headers .*mapping"),
        ({T + "URL": "http://m:1", T + "CUSTOM_HEADERS": '{"X-On": true}'}, "X-On .*must be a string"),
        ({T + "URL": "http://m:1", T + "CUSTOM_HEADERS": '{"X Org": "v"}'}, "not a valid HTTP header name"),
        ({T + "URL": "http://m:1", T + "CUSTOM_HEADERS": '{"X-A": "a\\r\\nB: c"}'}, "line break"),
        ({T + "URL": "http://m:1", T + "CUSTOM_HEADERS__CONTENT-ENCODING": "br"}, "compression: gzip"),
        ({T + "URL": "http://m:1", T + "CUSTOM_HEADERS__CONTENT-LENGTH": "9"}, "set by the sink itself"),
        ({T + "TYPE": "http"}, "needs a URL"),
    ],
)
def test_bad_openlineage_settings_are_one_line_config_errors(
    env: dict[str, str], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        settings_for({}, env, tmp_path)
    assert KEY not in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "env",
    [
        {"OPENLINEAGE_API_KEY": KEY, T + "CUSTOM_HEADERS__AUTHORIZATION": f"Bearer {ORG}"},
        {T + "AUTH__APIKEY": KEY, T + "CUSTOM_HEADERS": json.dumps({"Authorization": f"Bearer {ORG}"})},
        {"OPENLINEAGE_URL": f"http://user:{ORG}@m:1", T + "CUSTOM_HEADERS__AUTHORIZATION": "Basic eA=="},
    ],
)
def test_an_authorization_header_next_to_a_credential_is_refused(env: dict[str, str], tmp_path: Path) -> None:
    env = {"OPENLINEAGE_URL": "http://m:1", **env}
    with pytest.raises(ConfigError, match="both set the Authorization header") as caught:
        settings_for({}, env, tmp_path)
    assert KEY not in str(caught.value) and ORG not in str(caught.value)
    alone = {"OPENLINEAGE_URL": "http://m:1", T + "CUSTOM_HEADERS__AUTHORIZATION": f"Bearer {ORG}"}
    assert settings_for({}, alone, tmp_path).headers == (("authorization", f"Bearer {ORG}"),)


def test_header_values_never_reach_logs_repr_or_a_printed_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    yml = write_yml(
        tmp_path, {"type": "http", "url": "http://m:1", "custom_headers": {"X-Org": ORG, "X-V": "1"}}
    )
    monkeypatch.setenv("OPENLINEAGE_CONFIG", yml)
    monkeypatch.setenv(T + "CUSTOM_HEADERS__X_TOKEN", KEY)
    assert olstream_main(["sink", "--print-config"]) == 0
    printed = capsys.readouterr().out
    doc = json.loads(printed)
    assert doc["headers"] == {"X-Org": "***", "X-V": "***", "x_token": "***"}
    assert doc["sources"]["custom_headers.x_token"] == f"env {T}CUSTOM_HEADERS__X_TOKEN"
    settings = build_settings({}, dict(os.environ), tmp_path, tmp_path)
    shown = printed + repr(settings) + json.dumps(settings.describe())
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        for fmt in ("text", "json"):
            setup_logging(fmt)
            log = logging.getLogger("olstream.connectors.sink.test")
            log.warning("receiver echoed X-Org: %s, X-Token: %s at partition 1", ORG, KEY)
            shown += capsys.readouterr().err
    finally:
        root.handlers[:], root.level = saved
    assert ORG not in shown and KEY not in shown
    assert "partition 1" in shown  # a value under 4 characters (X-V: 1) is not redacted everywhere


@pytest.mark.parametrize(("value", "disabled"), [("true", True), (" TRUE ", True), ("True", True)])
def test_disabled_is_true_in_any_case(value: str, disabled: bool) -> None:
    assert is_disabled({"OPENLINEAGE_DISABLED": value}) is disabled


@pytest.mark.parametrize("value", ["1", "yes", "false", "", "on"])
def test_disabled_is_nothing_but_true(value: str) -> None:
    """openlineage-python: `os.getenv("OPENLINEAGE_DISABLED", "").lower().strip() == "true"`."""
    assert is_disabled({"OPENLINEAGE_DISABLED": value}) is False


def test_disabled_is_shown_by_print_config_and_a_bad_setting_still_exits_config(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENLINEAGE_DISABLED", "true")
    assert olstream_main(["sink", "--url", "http://m:1", "--print-config"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["disabled"] is True and doc["sources"]["disabled"] == "env OPENLINEAGE_DISABLED"
    assert (
        olstream_main(["sink", "--url", "marquez:5000"]) == 2
    )  # checked still: re-enabling finds no surprise
    assert olstream_main(["sink"]) == 2


def test_disabled_exits_ok_at_once_without_touching_kafka(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from olstream.connectors.sink import run

    def untouched(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Kafka touched while OPENLINEAGE_DISABLED=true")

    for name in ("Consumer", "Producer", "ensure_topic", "topic_partitions", "serve_metrics"):
        monkeypatch.setattr(run, name, untouched)
    monkeypatch.setenv("OPENLINEAGE_DISABLED", "true")
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        rc = olstream_main(["sink", "--url", "http://m:1", "--metrics-port", "9999", "--group", "g1"])
    finally:
        root.handlers[:], root.level = saved
    err = capsys.readouterr().err
    assert rc == 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "WARNING" in lines[0], err
    assert "delivers nothing and commits nothing" in lines[0] and "group g1" in lines[0]


def test_nested_ca_bundle_and_file_path_in_their_lower_cased_spellings(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not checked here")
    env = {"OPENLINEAGE_URL": "https://m:1", T + "SSLCONTEXT__CACERTPATH": str(ca)}
    s = settings_for({}, env, tmp_path)
    assert s.ca_file == str(ca) and dict(s.sources)["ca_file"] == f"env {T}SSLCONTEXT__CACERTPATH"
    out = str(tmp_path / "events.ndjson")
    as_file = settings_for({}, {T + "TYPE": "file", T + "LOG_FILE_PATH": out}, tmp_path)
    assert (as_file.transport, as_file.file_path) == ("file", out)


def test_disabled_spelled_otherwise_is_logged_as_still_enabled(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert is_disabled({"OPENLINEAGE_DISABLED": "1"}) is False
    assert "is not `true`" in caplog.text
