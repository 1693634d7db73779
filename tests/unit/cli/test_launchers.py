"""The local launchers' command lines: `status` of a stopped server exits 3 (`NOT_RUNNING`), `down`
and `status` take only their own flags, and no help text says Maven resolves Marquez."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from olstream.cli.main import build_parser
from olstream.cli.main import main as olstream_main
from olstream.shared.errors import ExitCode

LAUNCHERS = ("kafka", "postgres", "mirror", "marquez", "registry")
EVERY_ACTION = {"-h", "--help", "--data-dir", "--log-format", "--config", "--print-config"}
STOP_WAIT = {  # the flag bounding how long `down` waits before SIGKILL (and its hidden old spelling)
    "kafka": {"--stop-timeout", "--timeout"},
    "postgres": {"--stop-timeout", "--timeout"},
    "mirror": {"--stop-timeout"},
    "marquez": set(),  # `down` stops it with the launchers' 30 s
    "registry": {"--stop-timeout", "--timeout"},
}


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def action_parser(command: str, action: str) -> argparse.ArgumentParser:
    return subparsers(subparsers(build_parser())[command])[action]


def flags(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def helps(parser: argparse.ArgumentParser, path: str = "olstream") -> Iterator[tuple[str, str]]:
    """(command path, a help text) for every parser and flag of the whole command line."""
    yield path, parser.description or ""
    for action in parser._actions:
        yield f"{path} {'/'.join(action.option_strings)}", action.help or ""
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield f"{path} {choice.dest}", choice.help or ""
    for name, sub in subparsers(parser).items():
        yield from helps(sub, f"{path} {name}")


@pytest.mark.parametrize("command", LAUNCHERS)
def test_status_of_a_stopped_server_exits_not_running(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / command
    assert olstream_main([command, "status", "--data-dir", str(data_dir)]) == ExitCode.NOT_RUNNING == 3
    assert "no" in capsys.readouterr().out  # "running: no", "not running"
    assert not data_dir.exists()  # a question, not a start


@pytest.mark.parametrize("command", LAUNCHERS)
def test_status_takes_only_its_own_flags(command: str) -> None:
    assert flags(action_parser(command, "status")) == EVERY_ACTION


@pytest.mark.parametrize("command", LAUNCHERS)
def test_down_takes_only_its_own_flags(command: str) -> None:
    assert flags(action_parser(command, "down")) == EVERY_ACTION | STOP_WAIT[command]


@pytest.mark.parametrize(
    ("command", "flag"), [("marquez", "--port"), ("marquez", "--jar"), ("registry", "--port")]
)
@pytest.mark.parametrize("action", ["down", "status"])
def test_an_up_flag_given_to_down_or_status_is_refused(
    command: str, flag: str, action: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert flag in flags(action_parser(command, "up"))
    with pytest.raises(SystemExit) as refused:
        olstream_main([command, action, flag, "x"])
    assert refused.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_no_help_text_says_maven_resolves_marquez() -> None:
    texts = list(helps(build_parser()))
    assert len(texts) > 100
    said = [f"{where}: {text}" for where, text in texts if "Maven resolves" in text]
    assert said == []
    jar = dict(texts)["olstream marquez up --jar"]
    assert "../shared/marquez/" in jar and "does not serve" in jar


ONE_STYLE = re.compile(
    r"^[^\[]*(\[[^\]]*\][^\[]*)*\[(env [A-Z_]+(; (default .+|required))?|default .+|required)\]$"
)
NO_VALUE = {"-h", "--help", "--version", "--print-config", "--config"}


def test_every_flag_shows_its_default_one_way() -> None:
    """`what [env NAME; default VALUE]` (`required` for a setting without which the command refuses to
    run), never `(default: ...)`, `(env ...)`, `(required)` or a bare `[VALUE]`; a secret shows only its
    variable."""
    parser = build_parser()
    wrong = []
    for where, text in helps(parser):
        flag = where.rsplit(" ", 1)[-1]
        if not flag.startswith("-") or set(flag.split("/")) & NO_VALUE or text == argparse.SUPPRESS:
            continue
        if not ONE_STYLE.match(text) or "(default" in text or "(env " in text or "(required)" in text:
            wrong.append(f"{where}: {text}")
    assert wrong == []


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        ("source", "--log"),
        ("log simulate", "--log"),
        ("log simulate", "--runs"),
        ("mirror up", "--source-bootstrap"),
        ("mirror up", "--target-bootstrap"),
    ],
)
def test_a_required_setting_says_so_and_is_refused_when_missing(
    command: str, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    texts = dict(helps(build_parser()))
    assert texts[f"olstream {command} {flag}"].endswith("required]")
    given = {
        "source": ["source"],
        "log simulate": ["log", "simulate", *([] if flag == "--log" else ["--log", "sqlite:///x.db"])],
        "mirror up": ["mirror", "up", *({"--source-bootstrap", "--target-bootstrap"} - {flag}), "k:1"],
    }[command]
    assert olstream_main(given) == 2
    assert flag in capsys.readouterr().err
