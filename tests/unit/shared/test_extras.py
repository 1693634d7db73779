"""A command that needs a package of an extra not installed: one line naming the extra, exit 2."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from olstream.cli import tools
from olstream.cli.main import main as olstream_main
from olstream.shared.errors import ConfigError, ExitCode, MissingExtraError
from olstream.shared.extras import EXTRA_OF, extra_of_missing, require

EXPECTED = (
    "olstream graph: rendering the lineage graph needs the Python package graphviz of the extra `local`, "
    "not installed: pip install 'olstream[local]'\n"
)


@pytest.fixture
def without_graphviz(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "graphviz", None)  # `import graphviz` raises ModuleNotFoundError


def _events_file(tmp_path: Path) -> Path:
    event = {
        "eventType": "COMPLETE",
        "eventTime": "2026-01-01T00:00:00Z",
        "job": {"namespace": "engine://prod", "name": "daily"},
        "run": {"runId": "01890000-0000-7000-8000-000000000000", "facets": {}},
        "inputs": [],
        "outputs": [],
    }
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(event) + "\n", encoding="utf-8")
    return path


def test_require_names_the_extra_to_install(without_graphviz: None) -> None:
    with pytest.raises(MissingExtraError) as caught:
        require("graphviz", "rendering the lineage graph")
    assert isinstance(caught.value, ConfigError)  # one line and exit 2, as any setting error
    assert str(caught.value) == EXPECTED.removeprefix("olstream graph: ").rstrip("\n")


def test_require_returns_the_module_when_installed() -> None:
    assert require("json", "reading").dumps([]) == "[]"


def test_a_module_of_no_extra_is_not_reported_as_an_extra() -> None:
    with pytest.raises(ModuleNotFoundError):
        require("graphviz.no_such_submodule_anywhere", "drawing")
    assert extra_of_missing(ModuleNotFoundError(name="no_such_package")) is None
    assert extra_of_missing(ModuleNotFoundError(name="graphviz.backend")) is None  # graphviz is there
    assert extra_of_missing(ModuleNotFoundError(name="graphviz")) == "local"
    assert set(EXTRA_OF.values()) == {"local", "schema-registry"}
    assert extra_of_missing(ModuleNotFoundError(name="authlib")) == "schema-registry"


def test_graph_without_the_extra_is_one_line_and_exit_2(
    tmp_path: Path, without_graphviz: None, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = olstream_main(["graph", str(_events_file(tmp_path)), "-o", str(tmp_path / "g.svg")])
    out = capsys.readouterr()
    assert rc == ExitCode.CONFIG == 2
    assert out.err == EXPECTED
    assert not (tmp_path / "g.svg").exists()


def test_graph_dot_needs_no_extra(
    tmp_path: Path, without_graphviz: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert olstream_main(["graph", str(_events_file(tmp_path)), "--dot"]) == ExitCode.OK
    assert "digraph" in capsys.readouterr().out


def test_a_command_importing_an_extra_directly_gets_the_same_line(
    monkeypatch: pytest.MonkeyPatch, without_graphviz: None, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(args: argparse.Namespace) -> int:
        import graphviz  # noqa: F401

        return 0

    monkeypatch.setattr(tools, "_run_graph", run)
    assert olstream_main(["graph", "events.jsonl"]) == ExitCode.CONFIG
    assert capsys.readouterr().err == (
        "olstream graph: needs the Python package graphviz of the extra `local`, not installed: "
        "pip install 'olstream[local]'\n"
    )


def test_any_other_missing_module_is_a_defect_and_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(args: argparse.Namespace) -> int:
        raise ModuleNotFoundError("No module named 'nothing_like_it'", name="nothing_like_it")

    monkeypatch.setattr(tools, "_run_graph", run)
    with pytest.raises(ModuleNotFoundError):
        olstream_main(["graph", "events.jsonl"])
