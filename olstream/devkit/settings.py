"""Settings of the local-infrastructure commands and tools (kafka, postgres, marquez, registry, demo).

Declared once, resolved by the shared resolver like every service's: flags > environment >
the --config file (sections `kafka:`, `postgres:`, `marquez:`, `registry:`, `demo:`) > defaults.
A data directory left unset is the command's own folder under `$XDG_STATE_HOME/olstream/`.
The operations commands' settings (status, errors, explain) are in `olstream/operations/settings.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olstream.devkit import marquez, postgres, registry
from olstream.devkit.kafka_config import DEFAULT_KAFKA_VERSION, MAX_BROKERS, PLAINTEXT, SECURITY_MODES
from olstream.devkit.kafka_config import DEFAULT_PORT as KAFKA_PORT
from olstream.eventlog.settings import parse_base_time
from olstream.shared.config import (
    BOOTSTRAP,
    LOG_FORMAT,
    Old,
    Resolved,
    Setting,
    at_least,
    port_number,
    positive,
    resolve,
)


def _start_timeout(default: float, what: str, old_key: str = "") -> Setting:
    """How long `up` waits for the server (`--start-timeout`; `--timeout` until this release)."""
    old = Old(flag="--timeout", key=old_key)
    return Setting("start_timeout", default, what, parse=float, env="", check=positive, old=old)


def _stop_timeout(default: float, what: str, old_key: str = "") -> Setting:
    """How long `down` waits before SIGKILL (`--stop-timeout`; `--timeout` until this release)."""
    old = Old(flag="--timeout", key=old_key)
    return Setting("stop_timeout", default, what, parse=float, env="", check=positive, old=old)


LOCAL = "OLSTREAM_LOCAL_"
"""The prefix of the local launchers' variables (`OLSTREAM_LOCAL_KAFKA_PORT`): none looks like a setting
of the services' Kafka clients (`OLSTREAM_KAFKA_*`)."""


def local_env(launcher: str, key: str, old: str = "") -> dict[str, Any]:
    """`env` and `old` of a launcher's setting: OLSTREAM_LOCAL_<LAUNCHER>_<KEY>, read as
    `old` (else OLSTREAM_<LAUNCHER>_<KEY>) for one more release, with a warning."""
    name = f"{launcher}_{key}".upper()
    return {"env": LOCAL + name, "old": Old(env=old or f"OLSTREAM_{name}")}


def _data_dir(launcher: str, where: str, old: str = "") -> Setting:
    what = f"directory of the local {where} [~/.local/state/olstream/...]"
    return Setting("data_dir", None, what, **local_env(launcher, "data_dir", old))


def _port(default: int, launcher: str, what: str, old: str = "") -> Setting:
    return Setting("port", default, what, parse=int, check=_listen_port, **local_env(launcher, "port", old))


def _listen_port(v: Any) -> str | None:
    return port_number(v) or (None if v != 0 else "must be a port number, 1..65535")


KAFKA_DATA_DIR = _data_dir("kafka", "broker")
KAFKA_VERSION = Setting("version", DEFAULT_KAFKA_VERSION, "Kafka release (jars from Maven Central)",
                        **local_env("kafka", "version"))  # fmt: skip


def _broker_count(v: Any) -> str | None:
    return None if v is None or 1 <= v <= MAX_BROKERS else f"must be 1..{MAX_BROKERS}"


KAFKA_BROKERS = Setting(
    "brokers",
    1,
    f"KRaft nodes on loopback, each a broker and a controller (1..{MAX_BROKERS})",
    parse=int,
    check=_broker_count,
    **local_env("kafka", "brokers"),
)
KAFKA_SECURITY = Setting(
    "security",
    PLAINTEXT,
    "client listener: plaintext, or sasl_ssl (TLS, SCRAM and PLAIN users; writes DIR/client.properties)",
    choices=SECURITY_MODES,
    **local_env("kafka", "security"),
)
KAFKA_UP = (
    KAFKA_DATA_DIR,
    _port(KAFKA_PORT, "kafka", "broker port (node n: port+2(n-1))"),
    Setting(
        "controller_port",
        None,
        "KRaft controller port (node n: controller-port+2(n-1)) [port+1]",
        parse=int,
        env="",
        check=port_number,
    ),
    KAFKA_BROKERS,
    KAFKA_SECURITY,
    KAFKA_VERSION,
    _start_timeout(90.0, "seconds to wait for the broker"),
    LOG_FORMAT,
)
KAFKA_DOWN = (KAFKA_DATA_DIR, _stop_timeout(30.0, "seconds before SIGKILL"), LOG_FORMAT)
KAFKA_STATUS = (KAFKA_DATA_DIR, LOG_FORMAT)

POSTGRES_DATA_DIR = _data_dir("postgres", "server", old="OLSTREAM_PG_DATA_DIR")
POSTGRES_PORT = _port(postgres.DEFAULT_PORT, "postgres", "server port", old="OLSTREAM_PG_PORT")
POSTGRES_UP = (
    POSTGRES_DATA_DIR,
    POSTGRES_PORT,
    _start_timeout(60.0, "seconds to wait for the server"),
    LOG_FORMAT,
)
POSTGRES_DOWN = (POSTGRES_DATA_DIR, _stop_timeout(30.0, "seconds before SIGKILL"), LOG_FORMAT)
POSTGRES_STATUS = (POSTGRES_DATA_DIR, LOG_FORMAT)

MARQUEZ_DATA_DIR = _data_dir("marquez", "Marquez")
MARQUEZ_UP = (
    MARQUEZ_DATA_DIR,
    _port(marquez.DEFAULT_PORT, "marquez", "API port"),
    Setting("admin_port", None, "admin port [port+1]", parse=int, env="", check=port_number),
    Setting(
        "version",
        marquez.DEFAULT_MARQUEZ_VERSION,
        "Marquez release (what Maven is asked for without --jar; a jar's own version wins)",
        **local_env("marquez", "version"),
    ),
    Setting(
        "pg_url",
        None,
        "superuser URL of the PostgreSQL server of Marquez's database [the local `olstream postgres`]",
        **local_env("marquez", "pg_url"),
    ),
    Setting(
        "jar",
        None,
        "the Marquez server jar to run, built from Marquez's source, e.g. "
        "../shared/marquez/marquez-api-0.51.1.jar [none: `up` asks Maven for marquez-api, which the "
        "Maven Central reachable here does not serve]",
        **local_env("marquez", "jar"),
    ),
    LOG_FORMAT,
)
MARQUEZ_DOWN = (MARQUEZ_DATA_DIR, LOG_FORMAT)
MARQUEZ_STATUS = (MARQUEZ_DATA_DIR, LOG_FORMAT)

REGISTRY_DATA_DIR = _data_dir("registry", "schema registry (its pid and log; the schemas are in memory)")
REGISTRY_UP = (
    REGISTRY_DATA_DIR,
    _port(registry.DEFAULT_PORT, "registry", "HTTP port (the ccompat API at /apis/ccompat/v7)"),
    Setting(
        "version",
        registry.DEFAULT_VERSION,
        "Apicurio Registry release (from Maven Central; 2.6 runs on Java 17)",
        **local_env("registry", "version"),
    ),
    _start_timeout(120.0, "seconds to wait for the API", old_key="timeout"),
    LOG_FORMAT,
)
REGISTRY_DOWN = (
    REGISTRY_DATA_DIR,
    _stop_timeout(120.0, "seconds before SIGKILL", old_key="timeout"),
    LOG_FORMAT,
)
REGISTRY_STATUS = (REGISTRY_DATA_DIR, LOG_FORMAT)

DEMO = (
    Setting("runs", 500, "workflow runs to simulate", parse=int, env="", check=at_least(1)),
    Setting("workers", 2, "stream worker processes", parse=int, env="", check=at_least(1)),
    Setting("out", "lineage.jsonl", "events file (the sink's file transport)", env=""),
    Setting("graph", None, "picture to render [--out with .svg]", env=""),
    Setting("url", None, "post the events to this OpenLineage receiver instead", env=""),
    Setting("marquez", False, "send to a local Marquez (`olstream marquez up`)", switch=True, env=""),
    Setting(
        "bootstrap",
        None,
        "Kafka bootstrap servers [none: a local broker]",
        env=BOOTSTRAP.env,
        old=BOOTSTRAP.old,
    ),
    Setting("partitions", 6, "partitions of the demo topics", parse=int, env="", check=at_least(1)),
    Setting("seed", None, "simulator seed [0]", parse=int, env=""),
    Setting(
        "base_time",
        None,
        "simulated start time, ISO 8601 with offset [none: the workload ends now, dated today]",
        parse=parse_base_time,
        env="",
    ),
    Setting(
        "time_limit",
        600.0,
        "seconds the whole demo may take before it gives up",
        parse=float,
        env="",
        check=positive,
        old=Old(flag="--timeout", key="timeout"),
    ),
    Setting("keep", False, "keep the work directory (logs of every process)", switch=True, env=""),
    LOG_FORMAT,
)


def local_postgres(environ: Mapping[str, str]) -> postgres.PostgresSettings:
    """The local server `olstream postgres up` starts without flags (where Marquez keeps its database)."""
    r = resolve("postgres", POSTGRES_UP, {}, environ)
    return postgres.PostgresSettings(port=r["port"], data_dir=data_dir_of(r, postgres.default_data_dir()))


def data_dir_of(resolved: Resolved, default: Path) -> Path:
    """The resolved data directory, else the command's default one, absolute."""
    value = resolved["data_dir"]
    return (Path(value) if value else default).expanduser().resolve()
