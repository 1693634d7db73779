"""Sink configuration: precedence flags > env > openlineage.yml, the URL suffix rule, key redaction."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from olstream.cli.main import main as olstream_main
from olstream.connectors.sink.settings import build_settings, endpoint_url
from olstream.shared.errors import ConfigError
from olstream.shared.logs import setup_logging

KEY = "k3y-0f-the-receiver-5f2a9c"


def settings_for(flags: dict[str, Any], env: dict[str, str], tmp_path: Path) -> Any:
    return build_settings(flags, env, cwd=tmp_path, home=tmp_path / "home")


def write_yml(tmp_path: Path, transport: dict[str, Any]) -> Path:
    path = tmp_path / "ol.yml"
    path.write_text(json.dumps({"transport": transport}))  # JSON is YAML
    return path


@pytest.mark.parametrize(
    ("url", "endpoint", "expected"),
    [
        ("http://m:5000", None, "http://m:5000/api/v1/lineage"),
        ("http://m:5000/", None, "http://m:5000/api/v1/lineage"),
        ("http://m:5000/api/v1/lineage", None, "http://m:5000/api/v1/lineage"),
        ("http://m:5000/api/v1/lineage/", None, "http://m:5000/api/v1/lineage"),
        ("https://gw.example/base", None, "https://gw.example/base/api/v1/lineage"),
        ("http://m:5000", "custom/ingest", "http://m:5000/custom/ingest"),
        ("http://m:5000", "/custom/ingest", "http://m:5000/custom/ingest"),
        ("http://m:5000/custom/ingest", "custom/ingest", "http://m:5000/custom/ingest"),
        ("http://m:5000/exact/path", "", "http://m:5000/exact/path"),
    ],
)
def test_url_suffix_rule(url: str, endpoint: str | None, expected: str) -> None:
    assert endpoint_url(url, endpoint) == expected


def test_url_must_be_http() -> None:
    with pytest.raises(ConfigError, match="http"):
        endpoint_url("marquez:5000", None)


def test_flags_win_over_env_which_wins_over_the_file(tmp_path: Path) -> None:
    yml = write_yml(
        tmp_path,
        {"type": "http", "url": "http://from-file:1", "endpoint": "file/ep", "auth": {"apiKey": "file-key"}},
    )
    env = {"OPENLINEAGE_CONFIG": str(yml)}
    only_file = settings_for({}, env, tmp_path)
    assert only_file.url == "http://from-file:1/file/ep"
    assert only_file.api_key == "file-key"

    env |= {"OPENLINEAGE_URL": "http://from-env:2", "OPENLINEAGE_API_KEY": "env-key"}
    env_wins = settings_for({}, env, tmp_path)
    assert env_wins.url == "http://from-env:2/file/ep"  # endpoint still from the file
    assert env_wins.api_key == "env-key"
    env["OPENLINEAGE_ENDPOINT"] = "env/ep"
    assert settings_for({}, env, tmp_path).url == "http://from-env:2/env/ep"

    key_file = tmp_path / "key"
    key_file.write_text("flag-key\n")
    flags = {"url": "http://from-flag:3", "endpoint": "flag/ep", "api_key_file": str(key_file)}
    flag_wins = settings_for(flags, env, tmp_path)
    assert flag_wins.url == "http://from-flag:3/flag/ep"
    assert flag_wins.api_key == "flag-key"
    assert dict(flag_wins.sources)["url"] == "flag"


def test_transport_types_from_file_and_flags(tmp_path: Path) -> None:
    yml = write_yml(tmp_path, {"type": "file", "log_file_path": str(tmp_path / "out.ndjson")})
    env = {"OPENLINEAGE_CONFIG": str(yml)}
    s = settings_for({}, env, tmp_path)
    assert (s.transport, s.file_path) == ("file", str(tmp_path / "out.ndjson"))
    assert settings_for({"console": True}, env, tmp_path).transport == "console"
    assert settings_for({}, env | {"OPENLINEAGE_URL": "http://x"}, tmp_path).transport == "http"
    write_yml(tmp_path, {"type": "console"})
    assert settings_for({}, env, tmp_path).transport == "console"


def test_openlineage_yml_in_the_working_directory_and_timeouts(tmp_path: Path) -> None:
    yml = "transport:\n  type: http\n  url: http://cwd:5000\n  timeout: 7\n"
    (tmp_path / "openlineage.yml").write_text(yml)
    s = settings_for({}, {}, tmp_path)
    assert (s.url, s.total_timeout, s.connect_timeout) == ("http://cwd:5000/api/v1/lineage", 7.0, 5.0)
    assert settings_for({"http_timeout": 2.5}, {}, tmp_path).total_timeout == 2.5


def test_missing_or_bad_configuration_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no destination"):
        settings_for({}, {}, tmp_path)
    with pytest.raises(ConfigError, match="not a readable file"):
        settings_for({}, {"OPENLINEAGE_CONFIG": str(tmp_path / "nope.yml")}, tmp_path)
    with pytest.raises(ConfigError, match="not supported"):
        settings_for({}, {"OPENLINEAGE_CONFIG": str(write_yml(tmp_path, {"type": "kafka"}))}, tmp_path)
    with pytest.raises(ConfigError, match="API key file"):
        settings_for({"url": "http://x", "api_key_file": str(tmp_path / "missing")}, {}, tmp_path)
    with pytest.raises(ConfigError, match="CA file"):
        settings_for({"url": "https://x", "ca_file": str(tmp_path / "missing.pem")}, {}, tmp_path)


def test_the_api_key_never_reaches_logs_or_a_printed_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    rc = olstream_main(["sink", "--url", "http://m:5000", "--api-key-file", str(key_file), "--print-config"])
    printed = capsys.readouterr()
    assert rc == 0
    doc = json.loads(printed.out)
    assert doc["api_key"] == "***" and doc["url"] == "http://m:5000/api/v1/lineage"
    settings = settings_for({"url": "http://m:5000", "api_key_file": str(key_file)}, {}, tmp_path)
    assert KEY not in repr(settings)
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        for fmt in ("text", "json"):
            setup_logging(fmt)
            log = logging.getLogger("olstream.connectors.sink.test")
            log.error("receiver refused Authorization: Bearer %s (settings %s)", settings.api_key, settings)
            try:
                raise ValueError(f"boom {KEY}")
            except ValueError:
                log.exception("failure")
            err = capsys.readouterr().err
            assert KEY not in err and "Bearer ***" in err
    finally:
        root.handlers[:], root.level = saved


TOKEN = "tok3n-q7-0f-the-receiver"
PASSWORD = "s3cr3t-xyz"
USER = "sink-user-q7"


@pytest.mark.parametrize("where", ["flag", "env", "file"])
@pytest.mark.parametrize(
    ("userinfo", "hidden"),
    [(f"{USER}:{PASSWORD}", (USER, PASSWORD)), (TOKEN, (TOKEN,)), (f"{USER}:s3cr%3A3t-xyz", (USER, "s3cr"))],
)
def test_url_credentials_never_reach_logs_errors_or_a_printed_config(
    where: str,
    userinfo: str,
    hidden: tuple[str, ...],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from olstream.shared import logs

    monkeypatch.setattr(logs, "_SECRETS", set())
    for name in ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG", "OPENLINEAGE_API_KEY", "OPENLINEAGE_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    url = f"http://{userinfo}@receiver:5000"
    args = ["sink"]
    if where == "flag":
        args += ["--url", url]
    elif where == "env":
        monkeypatch.setenv("OPENLINEAGE_URL", url)
    else:
        monkeypatch.setenv("OPENLINEAGE_CONFIG", str(write_yml(tmp_path, {"type": "http", "url": url})))
    assert olstream_main([*args, "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed)["url"] == "http://***@receiver:5000/api/v1/lineage"
    settings = build_settings({"url": url} if where == "flag" else {}, dict(os.environ), tmp_path)
    assert settings.url is not None and userinfo in settings.url  # still used to authenticate
    shown = repr(settings) + settings.destination + json.dumps(settings.describe())
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        for fmt in ("text", "json"):
            setup_logging(fmt)
            log = logging.getLogger("olstream.connectors.sink.test")
            log.warning("cannot deliver to %s (settings %r)", settings.url, settings)
            log.warning("basic auth %s refused", userinfo)
            shown += capsys.readouterr().err
    finally:
        root.handlers[:], root.level = saved
    for secret in hidden:
        assert secret not in shown and secret not in printed, secret


def test_a_bad_url_is_refused_without_showing_its_credentials(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENLINEAGE_URL", raising=False)
    for bad in (f"{USER}:{PASSWORD}@receiver:5000", f"ftp://{USER}:{PASSWORD}@receiver/"):
        assert olstream_main(["sink", "--url", bad, "--print-config"]) == 2
        err = capsys.readouterr().err
        assert "must start with http://" in err and "***@receiver" in err
        assert PASSWORD not in err and USER not in err


def test_url_credentials_and_an_api_key_are_not_both_given(tmp_path: Path) -> None:
    """aiohttp refuses a URL's credentials next to an Authorization header: say so at start."""
    with pytest.raises(ConfigError, match="give one of them") as caught:
        settings_for({"url": f"http://{TOKEN}@m:5000"}, {"OPENLINEAGE_API_KEY": KEY}, tmp_path)
    assert TOKEN not in str(caught.value) and KEY not in str(caught.value)
