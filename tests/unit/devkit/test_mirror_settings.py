"""`olstream mirror` settings: resolution (flags > environment > file > defaults) and the CLI's refusals."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from olstream.cli.main import main as olstream_main
from olstream.devkit.mirror_config import MirrorSettings
from olstream.devkit.mirror_settings import MIRROR_DOWN, MIRROR_STATUS, MIRROR_UP, mirror_settings
from olstream.shared.config import resolve
from olstream.shared.errors import ConfigError, ExitCode

FLAGS = {"source_bootstrap": "a:9092", "target_bootstrap": "b:9092"}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OLSTREAM_"):
            monkeypatch.delenv(name)


def test_the_defaults_suit_a_local_pair(tmp_path: Path) -> None:
    r = resolve("mirror", MIRROR_UP, {**FLAGS, "data_dir": str(tmp_path)}, {})
    s = mirror_settings(r)
    assert s == MirrorSettings(source_bootstrap="a:9092", target_bootstrap="b:9092", data_dir=tmp_path)
    assert (s.source_alias, s.target_alias, s.topics) == ("A", "B", r"olstream\.eventlog")
    assert (s.replication_factor, s.refresh_interval, s.offset_flush_interval_ms) == (1, 5, 1000)
    assert s.replication_policy == "default" and s.version == "4.3.1"


def test_flags_environment_and_file(tmp_path: Path) -> None:
    config = tmp_path / "olstream.yml"
    config.write_text(
        "mirror:\n  replication_factor: 3\n  topics: 'olstream\\.eventlog|other'\n  data_dir: /x\n"
    )
    env = {
        "OLSTREAM_LOCAL_MIRROR_SOURCE_BOOTSTRAP": "env-a:9092",
        "OLSTREAM_LOCAL_MIRROR_TARGET_BOOTSTRAP": "env-b:9092",
        "OLSTREAM_LOCAL_MIRROR_DATA_DIR": str(tmp_path),
    }
    flags = {"config": str(config), "target_bootstrap": "flag-b:9092", "replication_policy": "identity"}
    r = resolve("mirror", MIRROR_UP, flags, env)
    s = mirror_settings(r)
    assert (s.source_bootstrap, s.target_bootstrap) == ("env-a:9092", "flag-b:9092")
    assert s.replication_factor == 3 and s.topics == r"olstream\.eventlog|other"
    assert s.data_dir == tmp_path and s.replication_policy == "identity"
    assert r.origins["replication_factor"] == f"file {config}"


def test_files_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = resolve("mirror", MIRROR_UP, {**FLAGS, "source_config": "a.properties", "properties": "x"}, {})
    s = mirror_settings(r)
    assert s.source_config == tmp_path / "a.properties" and s.properties == tmp_path / "x"
    assert s.target_config is None


@pytest.mark.parametrize("missing", ["source_bootstrap", "target_bootstrap"])
def test_both_clusters_are_required(missing: str) -> None:
    flags = {k: v for k, v in FLAGS.items() if k != missing}
    with pytest.raises(ConfigError, match=f"--{missing.replace('_', '-')}"):
        mirror_settings(resolve("mirror", MIRROR_UP, flags, {}))


def test_the_same_alias_twice_is_a_config_error() -> None:
    r = resolve("mirror", MIRROR_UP, {**FLAGS, "source_alias": "B"}, {})
    with pytest.raises(ConfigError, match="both 'B'"):
        mirror_settings(r)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--topics", "olstream(["),
        ("--source-alias", "a.b"),
        ("--replication-factor", "0"),
        ("--refresh-interval", "soon"),
        ("--offset-flush-interval-ms", "-1"),
        ("--replication-policy", "prefix"),
        ("--start-timeout", "0"),
    ],
)
def test_an_invalid_flag_is_one_line_and_exit_2(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["mirror", "up", "--source-bootstrap", "a:1", "--target-bootstrap", "b:1", flag, value]
    if flag == "--replication-policy":
        with pytest.raises(SystemExit):  # argparse's own choices
            olstream_main(argv)
        return
    assert olstream_main(argv) == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and flag in err and repr(value) in err


def test_up_without_a_cluster_is_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert olstream_main(["mirror", "up", "--data-dir", str(tmp_path)]) == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert err.startswith("olstream mirror up: no source cluster") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("action", ["up", "down", "status"])
def test_every_action_prints_its_config(
    action: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OLSTREAM_LOCAL_MIRROR_DATA_DIR", str(tmp_path))
    assert olstream_main(["mirror", action, "--print-config"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    declared = {"up": MIRROR_UP, "down": MIRROR_DOWN, "status": MIRROR_STATUS}[action]
    assert {s.key for s in declared} <= set(doc["sources"])
    assert (
        doc["data_dir"] == str(tmp_path)
        and doc["sources"]["data_dir"] == "env OLSTREAM_LOCAL_MIRROR_DATA_DIR"
    )


def test_status_of_nothing_is_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert olstream_main(["mirror", "status", "--data-dir", str(tmp_path)]) == ExitCode.NOT_RUNNING
    assert capsys.readouterr().out.startswith("running: no\n")
    assert olstream_main(["mirror", "down", "--data-dir", str(tmp_path)]) == ExitCode.OK
    assert "no MirrorMaker 2 running" in capsys.readouterr().out


def test_a_stale_state_file_is_not_running(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A pid that is gone (or recycled by another program) is not our MirrorMaker: down stops nothing."""
    state = {
        "pid": 2**22 + 1,
        "version": "4.3.1",
        "source_alias": "A",
        "source_bootstrap": "a:1",
        "target_alias": "B",
        "target_bootstrap": "b:1",
        "topics": "t",
        "replication_policy": "default",
        "data_dir": str(tmp_path),
        "started_at": 0.0,
        "ready_at": 1.0,
    }
    (tmp_path / "mirror.json").write_text(json.dumps(state))
    assert olstream_main(["mirror", "status", "--data-dir", str(tmp_path)]) == ExitCode.NOT_RUNNING
    assert olstream_main(["mirror", "down", "--data-dir", str(tmp_path)]) == ExitCode.OK
    assert not (tmp_path / "mirror.json").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bootstrap.servers=elsewhere:9092\n", "--source-config sets bootstrap.servers"),
        ('sasl.jaas.config=x password="s3cr\\uZZet";\n', "line 1: malformed"),
    ],
)
def test_a_bad_client_config_is_exit_2_before_anything_starts(
    text: str, expected: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "a.properties"
    config.write_text(text)
    argv = ["mirror", "up", "--data-dir", str(tmp_path / "mm"), "--source-config", str(config)]
    assert olstream_main([*argv, "--source-bootstrap", "a:1", "--target-bootstrap", "b:1"]) == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1 and "s3cr" not in err
    assert not (tmp_path / "mm" / "mirror.json").exists() and not (tmp_path / "mm" / "config").exists()
