"""Every name renamed in this release (an environment variable, a flag) still works for one more, and each
use logs one WARNING naming the new name, never the value; given both, the new one wins and the warning
says so. The renames are read from the declarations (`olstream.cli.reference.renames`), the table
docs/configuration.md shows, so a rename without its old name fails here."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from olstream.cli.main import build_parser
from olstream.cli.main import main as olstream_main
from olstream.cli.reference import every_command, renames
from olstream.shared import deprecated, logs
from olstream.shared.config import FileLayer, Setting, old_dest, resolve
from tests.support.paths import REPO

SECRET = "s3cr3t-value"
ENV_RENAMES = sorted((old, new) for old, new in renames() if old.startswith("OLSTREAM_"))
FLAG_RENAMES = sorted(
    (command, s) for command, settings in every_command().items() for s in settings if s.old.flag
)
WARNINGS = "olstream.shared.deprecated"
POSITIONAL = {"errors show": ["t"], "errors redrive": ["t"], "explain": ["r1"]}  # what the parser requires


def a_value(s: Setting) -> str:
    """A value the setting takes, as text: a string setting gets a secret-looking one."""
    if s.switch:
        return "true"
    if s.choices:
        return s.choices[-1]
    if s.parse in (int, float) or (s.check is not None and s.default is not None):
        return str(s.default) if s.default is not None else "3"
    return SECRET


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    deprecated.flush()
    return [r.getMessage() for r in caplog.records if r.name == WARNINGS and r.levelno == logging.WARNING]


def readers(old: str) -> list[tuple[str, Setting]]:
    return [(c, s) for c, settings in every_command().items() for s in settings if s.old.env == old]


def test_there_are_renames_and_each_new_name_is_declared() -> None:
    assert len(ENV_RENAMES) >= 40 and len(FLAG_RENAMES) >= 10
    declared = {s.env_name for settings in every_command().values() for s in settings}
    assert {new for _, new in ENV_RENAMES} <= declared
    assert not {old for old, _ in ENV_RENAMES} & declared  # an old name is nobody's current name


@pytest.mark.parametrize(("old", "new"), ENV_RENAMES, ids=[old for old, _ in ENV_RENAMES])
def test_an_old_environment_variable_still_works_and_warns_once_without_its_value(
    old: str, new: str, caplog: pytest.LogCaptureFixture
) -> None:
    for command, s in readers(old):
        deprecated.reset()
        caplog.clear()
        value = a_value(s)
        for _ in range(2):  # resolved twice (errors redrive, replay): still one warning
            r = resolve(command, [s], {}, {old: value})
            assert r.origins[s.key] == f"env {old}" and r[s.key] == s.convert(value), command
        lines = warned(caplog)
        assert len(lines) == 1 and old in lines[0] and new in lines[0], (command, lines)
        assert "deprecated" in lines[0] and value not in lines[0].replace(old, "").replace(new, "")


@pytest.mark.parametrize(("old", "new"), ENV_RENAMES, ids=[old for old, _ in ENV_RENAMES])
def test_given_both_variables_the_new_one_wins_and_the_warning_says_so(
    old: str, new: str, caplog: pytest.LogCaptureFixture
) -> None:
    command, s = readers(old)[0]
    value = a_value(s)
    r = resolve(command, [s], {}, {old: "old-" + value, new: value})
    assert r.origins[s.key] == f"env {new}" and r[s.key] == s.convert(value)
    (line,) = warned(caplog)
    assert f"{old} is deprecated and ignored: {new} is set too and wins" in line


@pytest.mark.parametrize(
    ("command", "setting"), FLAG_RENAMES, ids=[f"{c}-{s.old.flag}" for c, s in FLAG_RENAMES]
)
def test_an_old_flag_still_works_and_warns(
    command: str, setting: Setting, caplog: pytest.LogCaptureFixture
) -> None:
    argv = [*command.split(), *POSITIONAL.get(command, [])]
    args = build_parser().parse_args([*argv, setting.old.flag, "7"])
    assert getattr(args, old_dest(setting)) == "7" and getattr(args, setting.key) is None
    r = resolve(command, [setting], vars(args), {})
    assert r[setting.key] == 7.0 and r.origins[setting.key] == "flag"
    (line,) = warned(caplog)
    assert f"flag {setting.old.flag} is deprecated: use {setting.flag_name}" in line
    # given both spellings, the new one wins
    deprecated.reset()
    caplog.clear()
    args = build_parser().parse_args([*argv, setting.old.flag, "7", setting.flag_name, "8"])
    assert resolve(command, [setting], vars(args), {})[setting.key] == 8.0
    (line,) = warned(caplog)
    assert f"{setting.old.flag} is deprecated and ignored: {setting.flag_name} is set too and wins" in line


@pytest.mark.parametrize(
    ("command", "setting"),
    [(c, s) for c, s in FLAG_RENAMES if s.old.key],
    ids=[f"{c}-{s.old.key}" for c, s in FLAG_RENAMES if s.old.key],
)
def test_an_old_key_of_the_config_file_still_works_and_warns(
    command: str, setting: Setting, caplog: pytest.LogCaptureFixture
) -> None:
    layer = FileLayer({setting.old.key: 7}, "file olstream.yml")
    r = resolve(command, [setting], {}, {}, (layer,))
    assert r[setting.key] == 7.0
    (line,) = warned(caplog)
    assert f"key {setting.old.key} is deprecated: use {setting.key}" in line


def test_the_old_flag_is_hidden_from_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        olstream_main(["status", "--help"])
    shown = capsys.readouterr().out
    assert "--wait" in shown and "--timeout" not in shown


def test_a_command_warns_on_stderr_once_in_its_log_format(capsys: pytest.CaptureFixture[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLSTREAM_", "OPENLINEAGE_"))}
    argv = [str(Path(sys.executable).parent / "olstream"), "errors", "list", "--print-config"]
    done = subprocess.run(
        [*argv, "--timeout", "3"], env={**env, "OLSTREAM_BOOTSTRAP": "k:1"}, capture_output=True, text=True
    )
    assert done.returncode == 0 and '"bootstrap": "k:1"' in done.stdout and '"wait": 3.0' in done.stdout
    assert done.stderr.count("OLSTREAM_BOOTSTRAP is deprecated: use OLSTREAM_KAFKA_BOOTSTRAP") == 1
    assert done.stderr.count("flag --timeout is deprecated: use --wait") == 1
    assert len(done.stderr.splitlines()) == 2
    deprecated.note("OLSTREAM_X", "OLSTREAM_X is deprecated: use OLSTREAM_Y")
    logs.setup_logging("json", "INFO")  # a service: the warnings wait for its log format
    err = capsys.readouterr().err
    assert '"level": "WARNING"' in err and "OLSTREAM_X is deprecated" in err
    logging.getLogger().handlers.clear()


NO_OLD_NAMES = ("docker-compose.yml", "docker-compose.production.yml", "Dockerfile", "README.md", "deploy")


def test_compose_the_chart_and_the_docs_use_only_the_new_names() -> None:
    """The old names are in the generated table of docs/configuration.md and nowhere a user copies from
    (docs/testing.md names the test suite's own switches, such as OLSTREAM_BOOTSTRAP)."""
    paths: list[Path] = []
    for name in NO_OLD_NAMES:
        path = REPO / name
        paths += [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    paths += [p for p in (REPO / "docs").glob("*.md") if p.name not in ("configuration.md", "testing.md")]
    found: dict[str, Any] = {}
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        text = re.sub(r"OLSTREAM_BOOTSTRAP=\S+ \S*pytest", "", text)  # the test suite's own switch
        for old, _ in ENV_RENAMES:
            if re.search(rf"(?<![A-Z0-9_]){old}(?![A-Z0-9_])", text):
                found.setdefault(str(path.relative_to(REPO)), []).append(old)
    assert found == {}
