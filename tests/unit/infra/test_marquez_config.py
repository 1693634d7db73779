"""The rendered marquez.yml and the classpath choice (pure)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import yaml

from olstream.infra.marquez import MarquezSettings, is_shaded, jar_dir, render_config


def _settings() -> MarquezSettings:
    return MarquezSettings("0.50.0", 5123, 5124, Path("/tmp/mq"), "postgresql://su:pw@db.local:6543/postgres")


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
