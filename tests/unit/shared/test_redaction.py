"""Credentials in URLs: `redact_url` for one value, `redact` (every log line) for any text."""

from __future__ import annotations

import json
import logging

import pytest

from olstream.cli.main import main as olstream_main
from olstream.devkit.process import free_port
from olstream.eventlog.postgres_store import PostgresEventLogStore
from olstream.shared import logs
from olstream.shared.config import redact_url
from olstream.shared.errors import InfrastructureError
from olstream.shared.logs import hide_userinfo, redact, register_url_credentials, setup_logging


@pytest.fixture(autouse=True)
def _own_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no registered secret (and leaves none behind)."""
    monkeypatch.setattr(logs, "_SECRETS", set())


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://TOKEN0123@host/api", "https://***@host/api"),  # a token as the user name
        ("http://user:s3cret@host:80/p?q=1", "http://***@host:80/p?q=1"),
        ("http://us%40er:p%3Ass%2Fw@host/x", "http://***@host/x"),  # percent-encoded
        ("http://user:p@ss@host/x?mail=a@b", "http://***@host/x?mail=a@b"),  # host after the last @
        ("http://u:pw@[::1]:8080/x", "http://***@[::1]:8080/x"),  # IPv6 host
        ("http://u:pw@[fe80::1%25eth0]/x", "http://***@[fe80::1%25eth0]/x"),
        ("http://u:pw@[::1/x", "http://***@[::1/x"),  # does not parse: still no user info
        ("http://user:@host", "http://***@host"),  # an empty password
        ("postgresql://olstream:pg2@db:5432/log", "postgresql://***@db:5432/log"),
        ("postgresql://db/log?user=u&password=pg2", "postgresql://db/log?user=u&password=***"),
        ("http://host:5000/api/v1/lineage", "http://host:5000/api/v1/lineage"),  # unchanged
        ("http://host/a@b", "http://host/a@b"),  # an @ in the path is no user info
        ("sqlite:///var/lib/events.db", "sqlite:///var/lib/events.db"),
    ],
)
def test_redact_url_hides_the_whole_user_info(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_url_leaves_what_is_not_a_url() -> None:
    assert redact_url("kafka-1:9092") == "kafka-1:9092"
    assert redact_url("user@example") == "user@example"
    assert redact_url(5) == 5 and redact_url(None) is None


def test_hide_userinfo_without_a_scheme() -> None:
    assert hide_userinfo("user:pw@marquez:5000/x") == "***@marquez:5000/x"
    assert hide_userinfo("marquez:5000") == "marquez:5000"


def test_any_url_in_any_text_loses_its_user_info() -> None:
    text = (
        "POST http://user:pw@h:1/x failed; 'https://TOKEN@h2' \"postgresql://u@db/log\" "
        "(url=http://a:b@[::1]:9/p) and mail me at ops@example.org, see http://h/a@b"
    )
    assert redact(text) == (
        "POST http://***@h:1/x failed; 'https://***@h2' \"postgresql://***@db/log\" "
        "(url=http://***@[::1]:9/p) and mail me at ops@example.org, see http://h/a@b"
    )


def test_registered_url_credentials_are_redacted_outside_the_url_too() -> None:
    register_url_credentials("http://us%40er-q7:s3cr%3At-xyz@host/x")
    for shown in ("us@er-q7:s3cr:t-xyz", "us%40er-q7:s3cr%3At-xyz", "s3cr:t-xyz", "s3cr%3At-xyz"):
        assert redact(f"auth {shown} refused") == "auth *** refused", shown
    register_url_credentials("https://tok3n-abcdef@host")  # a lone user name is a token
    assert redact("token tok3n-abcdef") == "token ***"


def test_the_longest_secret_goes_first() -> None:
    """`user:pw` must not become `user:***` because `pw` was replaced first."""
    register_url_credentials("http://alice-q7:pw9@host")
    assert redact("alice-q7:pw9") == "***"


def test_a_lone_postgresql_role_is_not_a_registered_secret() -> None:
    register_url_credentials("postgresql://olstream@db/log", lone_user=False)
    assert (
        redact("olstream source: postgresql://olstream@db/log") == "olstream source: postgresql://***@db/log"
    )
    register_url_credentials("postgresql://olstream:pg-pw-q7@db/log", lone_user=False)
    assert redact("olstream:pg-pw-q7 pg-pw-q7") == "*** ***"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_lines_and_exceptions_never_show_url_credentials(
    fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    register_url_credentials('http://user-q7:s3cr"3t-xyz@host/x')
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        setup_logging(fmt)
        log = logging.getLogger("olstream.test")
        log.warning("cannot deliver to %s", "http://other-user:other-pw@h/x")
        log.warning('password s3cr"3t-xyz of user-q7:s3cr"3t-xyz')  # quoted: JSON escapes the quote
        try:
            raise ValueError("boom https://TOKEN-q7@h")
        except ValueError:
            log.exception("failed")
        err = capsys.readouterr().err
    finally:
        root.handlers[:], root.level = saved
    for secret in ("other-user", "other-pw", "s3cr", "user-q7", "TOKEN-q7"):
        assert secret not in err, (secret, err)
    assert "http://***@h/x" in err and "https://***@h" in err
    if fmt == "json":
        assert all(json.loads(line) for line in err.splitlines())


def test_an_event_log_that_cannot_be_reached_names_no_credential() -> None:
    url = f"postgresql://pg-user-q7:pg-s3cr%3At@127.0.0.1:{free_port()}/log?connect_timeout=2"
    with pytest.raises(InfrastructureError) as caught:
        PostgresEventLogStore.open(url)
    assert "cannot connect to the event-log database" in str(caught.value)
    for shown in (redact(str(caught.value)), redact(f"opening {url}"), redact_url(url)):
        assert "pg-s3cr" not in shown and "pg-user-q7" not in shown, shown


@pytest.mark.parametrize("command", [["source", "--log"], ["log", "simulate", "--runs", "1", "--log"]])
def test_every_command_taking_a_log_url_prints_its_config_without_credentials(
    command: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OLSTREAM_LOG_URL", raising=False)
    for url in ("postgresql://pg-user-q7:pg-s3cr3t@db/log", "postgresql://TOKEN-q7@db/log"):
        assert olstream_main([*command, url, "--print-config"]) == 0
        printed = capsys.readouterr().out
        assert json.loads(printed)["log_url"] == "postgresql://***@db/log"
        for secret in ("pg-user-q7", "pg-s3cr3t", "TOKEN-q7"):
            assert secret not in printed
    monkeypatch.setenv("OLSTREAM_LOG_URL", "postgresql://pg-user-q7:pg-s3cr3t@db/log")
    assert olstream_main([*command[:-1], "--print-config"]) == 0
    assert "pg-s3cr3t" not in capsys.readouterr().out
