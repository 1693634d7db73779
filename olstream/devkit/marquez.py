"""A local Marquez API server (no Docker), on a PostgreSQL database it owns.

The server is a jar: `--jar` names one (Marquez's own build, for example
`../shared/marquez/marquez-api-0.51.1.jar`, built from Marquez's source), else `up` asks Maven for
`io.github.marquezproject:marquez-api` into `~/.cache/olstream/marquez/<version>/libs` (once per
version), which the Maven Central reachable here does not serve (docs/limits.md): that attempt fails
and says to name a jar. `up` creates the `marquez` role and a database owned by it, renders
`marquez.yml` from the template `infra/marquez/marquez.yml` (in the wheel:
`olstream/devkit/marquez.yml`) and starts `marquez.MarquezApp server marquez.yml` on Java 17. It
records the server's pid, version and URL in its data dir, which is all `down` and `status` read.
"""

from __future__ import annotations

import logging
import re
import shutil
import string
import subprocess
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from olstream.devkit.kafka_jars import find_pom, find_shipped
from olstream.devkit.process import (
    answers_json,
    cache_home,
    port_free,
    running_pid,
    state_home,
    stop_pid,
    tail,
)
from olstream.shared.errors import ConfigError, InfrastructureError

if TYPE_CHECKING:
    from olstream.devkit.postgres import PostgresSettings

log = logging.getLogger(__name__)

DEFAULT_MARQUEZ_VERSION = "0.51.1"  # the newest release (no 0.52 is tagged)
DEFAULT_PORT = 5000
MAIN_CLASS = "marquez.MarquezApp"
HEAP_OPTS = ("-Xms128m", "-Xmx512m", "-XX:+UseG1GC")
PID_FILE = "marquez.pid"
VERSION_FILE = "marquez.version"  # the version the running server reported at start (its jar's manifest)
URL_FILE = "marquez.url"  # the API's URL
REQUEST_LOG_FILE = "marquez-requests.log"  # Marquez's request log: one line per HTTP request it answered
_SOURCE_DIR = Path(__file__).resolve().parents[2] / "infra" / "marquez"  # a checkout's files
_PACKAGED_DIR = Path(__file__).resolve().parent  # the wheel's copies of them (force-include)


def pom_path() -> Path:
    """infra/marquez/pom.xml of the source tree, else the wheel's olstream/devkit/marquez_pom.xml."""
    return find_pom((_SOURCE_DIR / "pom.xml", _PACKAGED_DIR / "marquez_pom.xml"), "Marquez")


def config_template() -> Path:
    """infra/marquez/marquez.yml of the source tree, else the wheel's olstream/devkit/marquez.yml."""
    return find_shipped(
        (_SOURCE_DIR / "marquez.yml", _PACKAGED_DIR / "marquez.yml"), "the Marquez configuration template"
    )


def default_data_dir() -> Path:
    return state_home() / "olstream" / "marquez"


def jar_dir(version: str) -> Path:
    return cache_home() / "olstream" / "marquez" / version / "libs"


@dataclass(frozen=True)
class MarquezSettings:
    """One local Marquez API server and the PostgreSQL database it keeps its metadata in."""

    version: str
    port: int
    admin_port: int
    data_dir: Path
    pg_admin_url: str  # a superuser URL of the PostgreSQL server; Marquez gets its own role and db
    jar: str | None = None  # the server jar to run (None: Maven is asked for marquez-api)
    db_name: str = "marquez"
    db_user: str = "marquez"
    db_password: str = "marquez"
    host: str = "127.0.0.1"
    start_timeout: float = 240.0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / PID_FILE

    @property
    def config_file(self) -> Path:
        return self.data_dir / "marquez.yml"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "marquez.out"

    @property
    def request_log_file(self) -> Path:
        return self.data_dir / REQUEST_LOG_FILE

    @property
    def version_file(self) -> Path:
        return self.data_dir / VERSION_FILE

    @property
    def url_file(self) -> Path:
        return self.data_dir / URL_FILE

    def jdbc_url(self) -> str:
        parts = urlsplit(self.pg_admin_url)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or 5432
        return f"jdbc:postgresql://{host}:{port}/{self.db_name}"


def render_config(settings: MarquezSettings, template: str | None = None) -> str:
    """marquez.yml with this server's ports and database filled in."""
    text = template if template is not None else config_template().read_text(encoding="utf-8")
    return string.Template(text).substitute(
        host=settings.host,
        port=settings.port,
        admin_port=settings.admin_port,
        jdbc_url=settings.jdbc_url(),
        db_user=settings.db_user,
        db_password=settings.db_password,
        request_log=settings.request_log_file,
    )


def is_shaded(jar: Path) -> bool:
    """True when the jar carries its own Dropwizard (a runnable fat jar)."""
    with zipfile.ZipFile(jar) as z:
        return any(n.startswith("io/dropwizard/") for n in z.namelist())


def jar_version(jar: Path) -> str | None:
    """The `Implementation-Version` of a jar's manifest, else None."""
    try:
        with zipfile.ZipFile(jar) as z:
            manifest = z.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    for line in manifest.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "Implementation-Version" and value.strip():
            return value.strip()
    return None


def running_version(settings: MarquezSettings, classpath: str) -> str:
    """The version of the Marquez that `classpath` runs: its server jar's manifest, else the setting."""
    configured = settings.version
    jar = main_jar(jar_dir(configured), configured) if classpath.endswith("*") else Path(classpath)
    found = None if jar is None else jar_version(jar)
    if found is None:
        log.warning("no version in the manifest of %s; assuming the configured %s", jar, configured)
        return configured
    if found != configured:
        log.info("the Marquez jar %s is version %s (the configured version is %s)", jar, found, configured)
    return found


def main_jar(libs: Path, version: str) -> Path | None:
    jar = libs / f"marquez-api-{version}.jar"
    return jar if jar.is_file() else None


def resolve_classpath(version: str, jar_file: str | None = None) -> str:
    """The Java classpath of the Marquez server: `jar_file`, else the jars Maven resolves (on first use)."""
    if jar_file:
        if not Path(jar_file).is_file():
            raise ConfigError(f"the Marquez jar {jar_file} is not a file")
        return jar_file
    libs = jar_dir(version)
    jar = main_jar(libs, version)
    if jar is None:
        download(version, libs)
        jar = main_jar(libs, version)
        if jar is None:
            raise InfrastructureError(f"Maven finished but {libs} holds no marquez-api-{version}.jar")
    return str(jar) if is_shaded(jar) else f"{libs}/*"


def download(version: str, libs: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise InfrastructureError("Maven (mvn) is not installed: apt-get install -y maven")
    cmd = [
        mvn,
        "-B",
        "-U",
        "-Dstyle.color=never",
        "-q",
        "-f",
        str(pom_path()),
        f"-Dmarquez.version={version}",
        f"-Doutput.dir={libs}",
        "dependency:copy-dependencies",
    ]
    log.info("resolving Marquez %s with Maven into %s", version, libs)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        errors = [
            ln.strip()
            for ln in re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr).splitlines()
            if "ERROR]" in ln and ln.strip() != "[ERROR]"
        ][:1]
        raise InfrastructureError(
            f"cannot resolve io.github.marquezproject:marquez-api:{version} from Maven's repositories "
            f"({' '.join(cmd)}): "
            + (" | ".join(errors) or f"exit {done.returncode}")
            + "; name a Marquez server jar with --jar (OLSTREAM_LOCAL_MARQUEZ_JAR)"
        )


def ensure_database(settings: MarquezSettings) -> None:
    """Create the Marquez role and a database OWNED by it (PostgreSQL 15+ needs the ownership)."""
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(settings.pg_admin_url, autocommit=True, connect_timeout=10) as conn:
            role = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (settings.db_user,)).fetchone()
            if role is None:
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                        sql.Identifier(settings.db_user), sql.Literal(settings.db_password)
                    )
                )
            db = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (settings.db_name,)).fetchone()
            if db is None:
                conn.execute(
                    sql.SQL("CREATE DATABASE {} OWNER {}").format(
                        sql.Identifier(settings.db_name), sql.Identifier(settings.db_user)
                    )
                )
    except psycopg.Error as e:
        raise InfrastructureError(f"cannot prepare the Marquez database {settings.db_name!r}: {e}") from e


def read_pid(settings: MarquezSettings) -> int | None:
    return running_pid(settings.pid_file)


def _recorded(path: Path, default: str) -> str:
    try:
        return path.read_text().strip() or default
    except OSError:
        return default


def api_ready(url: str, timeout: float = 2.0) -> bool:
    return answers_json(f"{url}/api/v1/namespaces", timeout)


def up(settings: MarquezSettings) -> str:
    """Start Marquez (or find it running) and return its URL once the API answers."""
    if read_pid(settings) is not None and api_ready(settings.url):
        return settings.url
    java = shutil.which("java")
    if java is None:
        raise InfrastructureError("Java 17 is not installed: apt-get install -y openjdk-17-jre-headless")
    if not port_free(settings.host, settings.port):
        raise InfrastructureError(f"port {settings.port} is taken: choose another with --port")
    classpath = resolve_classpath(settings.version, settings.jar)
    version = running_version(settings, classpath)
    ensure_database(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(render_config(settings), encoding="utf-8")
    cmd = [
        java,
        "-Duser.timezone=UTC",
        *HEAP_OPTS,
        "-cp",
        classpath,
        MAIN_CLASS,
        "server",
        str(settings.config_file),
    ]
    with settings.log_file.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    settings.pid_file.write_text(str(proc.pid))
    settings.version_file.write_text(version)
    settings.url_file.write_text(settings.url)
    deadline = time.monotonic() + settings.start_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise InfrastructureError(
                f"Marquez exited with {proc.returncode}; last log lines:\n{tail(settings.log_file)}"
            )
        if api_ready(settings.url):
            log.info(
                "Marquez %s is up at %s (pid %d); request log %s",
                version,
                settings.url,
                proc.pid,
                settings.request_log_file,
            )
            return settings.url
        time.sleep(1.0)
    stop_pid(proc.pid)
    raise InfrastructureError(
        f"Marquez did not answer on {settings.url} within {settings.start_timeout:.0f}s; "
        f"last log lines:\n{tail(settings.log_file)}"
    )


def down(data_dir: Path) -> bool:
    """Stop the Marquez this data dir started; False when none was running."""
    pid = running_pid(data_dir / PID_FILE)
    if pid is None:
        return False
    stop_pid(pid)
    (data_dir / PID_FILE).unlink(missing_ok=True)
    return True


def status(data_dir: Path) -> str | None:
    """What runs for this data dir (its version, URL and request log), or None when nothing does."""
    pid = running_pid(data_dir / PID_FILE)
    if pid is None:
        return None
    version = _recorded(data_dir / VERSION_FILE, "of unknown version")
    url = _recorded(data_dir / URL_FILE, f"http://127.0.0.1:{DEFAULT_PORT}")  # started before the URL file
    answering = "" if api_ready(url) else ", API not answering"
    where = f"at {url}{answering}; request log {data_dir / REQUEST_LOG_FILE}"
    return f"Marquez {version} running (pid {pid}) {where}"


def local_pg_admin_url(settings: PostgresSettings) -> str:
    """The superuser URL of the local `olstream postgres` server (started when it is not running)."""
    from olstream.devkit import postgres

    state, started = postgres.start_server(settings)
    if started:
        log.info("started the local PostgreSQL for Marquez (stop it with `olstream postgres down`)")
    return state.url


def settings_of(values: Mapping[str, Any], local_postgres: PostgresSettings) -> MarquezSettings:
    """What `up` starts, from the resolved settings of `marquez up` (olstream.devkit.settings.MARQUEZ_UP).

    Without `pg_url`, Marquez's database is on the local `olstream postgres` server
    (`local_postgres`, started when it is not running).
    """
    pg_url = values["pg_url"] or local_pg_admin_url(local_postgres)
    data_dir = Path(values["data_dir"]) if values["data_dir"] else default_data_dir()
    return MarquezSettings(
        version=values["version"],
        port=values["port"],
        admin_port=values["admin_port"] or values["port"] + 1,
        data_dir=data_dir.expanduser().resolve(),
        pg_admin_url=pg_url,
        jar=values["jar"],
    )
