"""The rendered marquez.yml and the classpath choice (pure)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import yaml

from olstream.devkit.marquez import (
    DEFAULT_MARQUEZ_VERSION,
    MarquezSettings,
    is_shaded,
    jar_dir,
    jar_version,
    render_config,
    running_version,
)


def _settings(version: str = "0.51.1") -> MarquezSettings:
    return MarquezSettings(version, 5123, 5124, Path("/tmp/mq"), "postgresql://su:pw@db.local:6543/postgres")


def test_config_has_ports_database_legacy_uris_and_no_search() -> None:
    doc = yaml.safe_load(render_config(_settings()))
    app = doc["server"]["applicationConnectors"][0]
    assert (app["port"], app["httpCompliance"]) == (5123, "RFC7230_LEGACY")
    assert doc["server"]["adminConnectors"][0]["port"] == 5124
    assert doc["db"]["url"] == "jdbc:postgresql://db.local:6543/marquez"
    assert (doc["db"]["user"], doc["db"]["driverClass"]) == ("marquez", "org.postgresql.Driver")
    assert doc["migrateOnStartup"] is True
    assert doc["search"] == {"enabled": False}


def test_jars_are_cached_per_version() -> None:
    assert jar_dir("0.50.0").parts[-4:] == ("olstream", "marquez", "0.50.0", "libs")


def test_a_jar_with_dropwizard_inside_is_shaded(tmp_path: Path) -> None:
    fat, thin = tmp_path / "fat.jar", tmp_path / "thin.jar"
    with zipfile.ZipFile(fat, "w") as z:
        z.writestr("marquez/MarquezApp.class", b"")
        z.writestr("io/dropwizard/core/Application.class", b"")
    with zipfile.ZipFile(thin, "w") as z:
        z.writestr("marquez/MarquezApp.class", b"")
    assert is_shaded(fat)
    assert not is_shaded(thin)


def test_the_request_log_goes_to_a_file_in_the_data_dir() -> None:
    doc = yaml.safe_load(render_config(_settings()))
    [appender] = doc["server"]["requestLog"]["appenders"]
    assert appender == {"type": "file", "currentLogFilename": "/tmp/mq/marquez-requests.log",
                        "archive": False}  # fmt: skip
    assert _settings().request_log_file == Path("/tmp/mq/marquez-requests.log")


def test_the_default_is_the_newest_release() -> None:
    assert DEFAULT_MARQUEZ_VERSION == "0.51.1"


def test_the_version_run_is_the_one_in_the_jars_manifest(tmp_path: Path) -> None:
    jar, bare = tmp_path / "marquez-api.jar", tmp_path / "bare.jar"
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nImplementation-Version: 0.51.1\r\n")
    with zipfile.ZipFile(bare, "w") as z:
        z.writestr("marquez/MarquezApp.class", b"")
    assert jar_version(jar) == "0.51.1" and jar_version(bare) is None
    assert running_version(_settings("0.50.0"), str(jar)) == "0.51.1"  # what runs, not what was asked
    assert running_version(_settings("0.50.0"), str(bare)) == "0.50.0"  # no manifest: the setting
