"""A local Apicurio Registry (no Docker) for development and tests: a Confluent-compatible Schema
Registry API at ``http://127.0.0.1:<port>/apis/ccompat/v7``.

Apicurio Registry 2.6 is on Maven Central as a Quarkus tarball (``io.apicurio:apicurio-registry-app:
<version>:tar.gz:all``). `up` asks Maven to copy it into ``~/.cache/olstream/apicurio/<version>``
and unpacks it there, once per version (as the Kafka jars are cached), then starts
``java -jar apicurio-registry-app-<version>-runner.jar`` on Java 17 with in-memory storage: what it
holds is gone when it stops. 3.x needs Java 21.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from olstream.devkit.kafka_jars import LOG_TAIL_LINES, find_executable
from olstream.devkit.process import (
    answers_json,
    cache_home,
    file_lock,
    port_free,
    running_pid,
    state_home,
    stop_pid,
    tail,
)
from olstream.shared.errors import InfrastructureError

log = logging.getLogger(__name__)

DEFAULT_VERSION = "2.6.13.Final"
DEFAULT_PORT = 18081
CCOMPAT_PATH = "/apis/ccompat/v7"
HEAP_OPTS = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC")
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"


def default_data_dir() -> Path:
    return state_home() / "olstream" / "registry"


def install_dir(version: str) -> Path:
    return cache_home() / "olstream" / "apicurio" / version


@dataclass(frozen=True)
class RegistrySettings:
    """One local Apicurio Registry: its port, the folder of its pid and log, its release."""

    data_dir: Path
    port: int = DEFAULT_PORT
    version: str = DEFAULT_VERSION
    start_timeout: float = 120.0
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        """The Confluent-compatible API: what --schema-registry takes."""
        return f"http://{self.host}:{self.port}{CCOMPAT_PATH}"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "registry.pid"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "registry.log"

    @property
    def url_file(self) -> Path:
        return self.data_dir / "registry.url"


def runner_jar(version: str) -> Path:
    """The runner jar of `version`, resolved from Maven Central and unpacked once, then cached."""
    home = install_dir(version)
    jar = home / f"apicurio-registry-app-{version}-runner.jar"
    if (home / ".complete").exists():
        return jar
    with file_lock(home.parent / f".{version}.lock"):
        if (home / ".complete").exists():
            return jar
        staging = home.parent / f"{version}.staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            tarball = _download(version, staging)
            with tarfile.open(tarball) as tar:
                tar.extractall(staging, filter="data")
            tarball.unlink()
            if not (staging / jar.name).is_file():
                raise InfrastructureError(f"{jar.name} is not in the Apicurio tarball of {version}")
            shutil.rmtree(home, ignore_errors=True)
            staging.rename(home)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        (home / ".complete").touch()
    return jar


def _download(version: str, into: Path) -> Path:
    mvn = find_executable("mvn", "MAVEN_HOME")
    artifact = f"io.apicurio:apicurio-registry-app:{version}:tar.gz:all"
    cmd = [
        mvn,
        "-B",
        "-q",
        f"{DEPENDENCY_PLUGIN}:copy",
        f"-Dartifact={artifact}",
        f"-DoutputDirectory={into}",
    ]
    log.info("resolving Apicurio Registry %s from Maven Central into %s", version, into.parent)
    started = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    if result.returncode != 0:
        output = "\n".join((result.stdout + result.stderr).splitlines()[-LOG_TAIL_LINES:])
        raise InfrastructureError(f"Maven could not resolve {artifact}:\n{output}")
    found = list(into.glob("*.tar.gz"))
    if len(found) != 1:
        raise InfrastructureError(f"Maven ran but no Apicurio tarball is in {into}")
    log.info("resolved Apicurio Registry %s in %.1f s", version, time.monotonic() - started)
    return found[0]


def read_pid(settings: RegistrySettings) -> int | None:
    return running_pid(settings.pid_file)


def api_ready(url: str, timeout: float = 2.0) -> bool:
    """True when the Confluent-compatible API answers (its global compatibility rule)."""
    return answers_json(f"{url}/config", timeout)


def up(settings: RegistrySettings) -> str:
    """Start the registry (or find it running) and return its ccompat URL once it answers."""
    if read_pid(settings) is not None and api_ready(settings.url):
        return settings.url
    java = find_executable("java", "JAVA_HOME")
    if not port_free(settings.host, settings.port):
        raise InfrastructureError(f"port {settings.port} is taken: choose another with --port")
    jar = runner_jar(settings.version)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        java,
        *HEAP_OPTS,
        f"-Dquarkus.http.port={settings.port}",
        f"-Dquarkus.http.host={settings.host}",
        "-jar",
        str(jar),
    ]
    with settings.log_file.open("ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=jar.parent
        )
    settings.pid_file.write_text(str(proc.pid))
    settings.url_file.write_text(settings.url)
    deadline = time.monotonic() + settings.start_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise InfrastructureError(
                f"Apicurio Registry exited with {proc.returncode}; last log lines:\n{tail(settings.log_file)}"
            )
        if api_ready(settings.url):
            log.info("Apicurio Registry %s is up at %s (pid %d)", settings.version, settings.url, proc.pid)
            return settings.url
        time.sleep(0.5)
    stop_pid(proc.pid)
    raise InfrastructureError(
        f"Apicurio Registry did not answer on {settings.url} within {settings.start_timeout:.0f}s; "
        f"last log lines:\n{tail(settings.log_file)}"
    )


def down(settings: RegistrySettings) -> bool:
    """Stop the registry this data dir started; False when none was running."""
    pid = read_pid(settings)
    if pid is None:
        return False
    stop_pid(pid, settings.start_timeout)
    settings.pid_file.unlink(missing_ok=True)
    return True


def status(settings: RegistrySettings) -> str | None:
    """What runs, or None when nothing does."""
    pid = read_pid(settings)
    if pid is None:
        return None
    try:
        url = settings.url_file.read_text().strip()
    except OSError:
        url = settings.url
    answering = "" if api_ready(url) else ", API not answering"
    return f"Apicurio Registry running (pid {pid}) at {url}{answering}; log {settings.log_file}"
