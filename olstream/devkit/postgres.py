"""A local PostgreSQL server from the Debian packages, for tests, the event-log store and Marquez."""

from __future__ import annotations

import glob
import json
import logging
import os
import pwd
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from olstream.devkit import process
from olstream.devkit.launcher import Launcher, ServerStatus
from olstream.shared.errors import InfrastructureError

log = logging.getLogger(__name__)

DEFAULT_PORT = 15432
DEFAULT_HOST = "127.0.0.1"
SERVER_USER = "postgres"  # the OS account that runs the server when olstream runs as root
STATE_FILE = "postgres.json"
LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class PostgresSettings:
    """One local PostgreSQL cluster with a superuser role and a database of the same name."""

    port: int
    data_dir: Path
    host: str = DEFAULT_HOST
    user: str = "olstream"
    password: str = "olstream"
    database: str = "olstream"
    start_timeout: float = 60.0

    @property
    def cluster_dir(self) -> Path:
        return self.data_dir / "pgdata"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "log" / "postgres.log"

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.database}"


@dataclass(frozen=True)
class PostgresState:
    """What `up` records in <data-dir>/postgres.json."""

    pid: int
    version: str
    host: str
    port: int
    url: str
    data_dir: str
    started_at: float


PostgresStatus = ServerStatus[PostgresState]


def default_data_dir() -> Path:
    """`$XDG_STATE_HOME/olstream/postgres` (~/.local/state/...); the setting `data_dir`
    (OLSTREAM_LOCAL_POSTGRES_DATA_DIR, olstream.devkit.settings) names another.

    As root the home directory is usually closed to the `postgres` account: /var/lib/olstream/postgres.
    """
    if os.geteuid() == 0:
        return Path("/var/lib/olstream/postgres")
    return process.state_home() / "olstream" / "postgres"


def find_bin_dir() -> Path:
    """The newest /usr/lib/postgresql/<N>/bin, else the directory of `pg_ctl` on PATH."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0,
    )
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    raise InfrastructureError(
        "PostgreSQL server binaries not found (apt-get install postgresql, or put pg_ctl on PATH)"
    )


def _as_server_user() -> list[str]:
    """Command prefix: PostgreSQL refuses to run as root, so root runs it as the postgres account."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError as e:
        raise InfrastructureError(
            f"running as root needs the OS user {SERVER_USER!r} to run PostgreSQL"
        ) from e
    return ["runuser", "-u", SERVER_USER, "--"]


def _run(cmd: list[str], what: str) -> str:
    result = subprocess.run(
        [*_as_server_user(), *cmd],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
        start_new_session=True,
    )
    if result.returncode != 0:
        output = "\n".join((result.stdout + result.stderr).splitlines()[-LOG_TAIL_LINES:])
        raise InfrastructureError(f"{what} failed (exit {result.returncode}):\n{output}")
    return result.stdout


def _prepare_dirs(settings: PostgresSettings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.log_file.parent.mkdir(parents=True, exist_ok=True)
    settings.cluster_dir.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        account = pwd.getpwnam(SERVER_USER)
        os.chmod(settings.data_dir, 0o755)
        for path in (settings.cluster_dir, settings.log_file.parent):
            os.chown(path, account.pw_uid, account.pw_gid)
        if settings.log_file.exists():
            os.chown(settings.log_file, account.pw_uid, account.pw_gid)
        probe = subprocess.run(
            [*_as_server_user(), "test", "-w", str(settings.cluster_dir)],
            check=False,
            stdin=subprocess.DEVNULL,
        )
        if probe.returncode != 0:
            raise InfrastructureError(
                f"the {SERVER_USER!r} account cannot reach {settings.cluster_dir}; "
                "choose a --data-dir whose parent directories are world-traversable"
            )
    os.chmod(settings.cluster_dir, 0o700)


def _init_cluster(settings: PostgresSettings, bin_dir: Path) -> None:
    if (settings.cluster_dir / "PG_VERSION").exists():
        return
    pwfile = settings.data_dir / ".pwfile"
    pwfile.write_text(settings.password + "\n")
    try:
        if os.geteuid() == 0:
            account = pwd.getpwnam(SERVER_USER)
            os.chown(pwfile, account.pw_uid, account.pw_gid)
        os.chmod(pwfile, 0o600)
        _run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(settings.cluster_dir),
                "-U",
                settings.user,
                f"--pwfile={pwfile}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ],
            "initdb",
        )
    finally:
        pwfile.unlink(missing_ok=True)
    conf = settings.cluster_dir / "postgresql.conf"
    with conf.open("a") as f:
        f.write(
            "\n# olstream local development/test server\n"
            "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
            "max_connections = 200\nlog_min_messages = warning\n"
        )
    log.info("initialised PostgreSQL cluster in %s", settings.cluster_dir)


def _server_options(settings: PostgresSettings) -> str:
    return " ".join(
        [
            f"-c listen_addresses={settings.host}",
            f"-c port={settings.port}",
            f"-c unix_socket_directories={settings.cluster_dir}",
        ]
    )


def _postmaster_pid(settings: PostgresSettings) -> int | None:
    try:
        first = (settings.cluster_dir / "postmaster.pid").read_text().splitlines()[0]
        return int(first.strip())
    except (OSError, IndexError, ValueError):
        return None


def _is_our_server(state: PostgresState) -> bool:
    if not process.pid_alive(state.pid):
        return False
    cmdline = process.pid_cmdline(state.pid)
    return not cmdline or any(str(Path(state.data_dir) / "pgdata") in part for part in cmdline)


# SIGINT is PostgreSQL's "fast" shutdown; a stop escalates to SIGKILL after its timeout
SERVERS = Launcher("PostgreSQL", STATE_FILE, PostgresState, _is_our_server, first_signal=signal.SIGINT)
read_state = SERVERS.read_state
server_status = SERVERS.status


def _create_database(settings: PostgresSettings) -> None:
    admin_url = _with_database(settings.url, "postgres")
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (settings.database,)
            ).fetchone()
            if exists is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(settings.database)))
    except psycopg.Error as e:
        raise InfrastructureError(f"cannot create database {settings.database!r}: {e}") from e


def start_server(settings: PostgresSettings) -> tuple[PostgresState, bool]:
    """Start the cluster of `settings.data_dir` unless it runs; (state, True when this call started it)."""
    with SERVERS.starting(settings.data_dir) as current:
        if current is not None:
            return current, False
        if not process.port_free(settings.host, settings.port):
            raise InfrastructureError(
                f"port {settings.host}:{settings.port} is already in use by another process"
            )
        bin_dir = find_bin_dir()
        _prepare_dirs(settings)
        _init_cluster(settings, bin_dir)
        try:
            _run(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(settings.cluster_dir),
                    "-l",
                    str(settings.log_file),
                    "-o",
                    _server_options(settings),
                    "-w",
                    "-t",
                    str(int(settings.start_timeout)),
                    "start",
                ],
                "pg_ctl start",
            )
        except InfrastructureError as e:
            tail = process.tail(settings.log_file, LOG_TAIL_LINES)
            raise InfrastructureError(
                f"PostgreSQL did not start: {e}\n--- {settings.log_file} ---\n{tail}"
            ) from e
        pid = _postmaster_pid(settings)
        if pid is None:
            raise InfrastructureError(
                f"PostgreSQL started but {settings.cluster_dir}/postmaster.pid is unreadable"
            )
        state = PostgresState(
            pid=pid,
            version=(settings.cluster_dir / "PG_VERSION").read_text().strip(),
            host=settings.host,
            port=settings.port,
            url=settings.url,
            data_dir=str(settings.data_dir),
            started_at=time.time(),
        )
        (settings.data_dir / STATE_FILE).write_text(json.dumps(asdict(state), indent=2) + "\n")
        _create_database(settings)
        return state, True


def stop_server(data_dir: Path, timeout: float = 30.0) -> PostgresState | None:
    """Stop exactly the server recorded in `data_dir` (fast shutdown by pid; SIGKILL after `timeout`)."""
    return SERVERS.stop(data_dir, timeout)


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


def create_test_database(server_url: str, prefix: str = "t") -> str:
    """A fresh, uniquely named database on the server of `server_url`; returns its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_with_database(server_url, "postgres"), autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return _with_database(server_url, name)


def drop_database(url: str) -> None:
    """Drop the database named in `url`, disconnecting any session still using it."""
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(_with_database(url, "postgres"), autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
