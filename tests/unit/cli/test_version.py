"""`olstream --version`, the version in `--print-config`, and `olstream_build_info` of every service."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import olstream
from olstream.cli.main import main as olstream_main
from olstream.shared import version
from olstream.shared.errors import ExitCode
from olstream.shared.metrics import BUILD_INFO  # noqa: F401  (registers the gauge)


def test_version_prints_the_installed_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        olstream_main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"olstream {importlib.metadata.version('olstream')}\n"


def test_without_package_metadata_the_version_is_the_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert version.package_version() == olstream.__version__
    monkeypatch.delattr(olstream, "__version__")
    assert version.package_version() == "unknown"


@pytest.mark.parametrize(
    "argv",
    [
        ["source", "--log", "sqlite:///nowhere.db"],
        ["worker"],
        ["sink", "--console"],
        ["replay", "--console"],
        ["kafka", "status"],
        ["status"],
    ],
)
def test_print_config_names_the_version(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OLSTREAM_LOCAL_KAFKA_DATA_DIR", str(tmp_path))
    assert olstream_main([*argv, "--print-config"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["olstream_version"] == version.package_version()


def test_every_service_exports_its_build_info() -> None:
    """The gauge is olstream.shared.metrics's, which serves the metrics of source, worker and sink."""
    samples = [s for f in REGISTRY.collect() if f.name == "olstream_build_info" for s in f.samples]
    assert [(s.labels, s.value) for s in samples] == [({"version": version.package_version()}, 1.0)]
