"""The jars of a Kafka release, resolved with Maven from Maven Central once per version and cached."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

from olstream.devkit import process
from olstream.devkit.kafka_config import jar_cache_dir, logging_profile
from olstream.shared.errors import InfrastructureError

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 40
_REPO_POM = Path(__file__).resolve().parents[2] / "infra" / "kafka" / "pom.xml"
_PACKAGED_POM = Path(__file__).resolve().with_name("kafka_pom.xml")


def find_shipped(candidates: tuple[Path, ...], what: str) -> Path:
    """The first file that exists: the source tree's, else the copy shipped inside the wheel
    (pyproject.toml's `[tool.hatch.build.targets.wheel.force-include]`)."""
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise InfrastructureError(f"cannot find {what} (looked at {', '.join(map(str, candidates))})")


def find_pom(candidates: tuple[Path, ...], what: str) -> Path:
    """The first pom that exists: the source tree's, else the copy shipped inside the wheel."""
    return find_shipped(candidates, f"the {what} pom")


def pom_path() -> Path:
    """infra/kafka/pom.xml of the source tree (or the copy shipped inside the wheel)."""
    return find_pom((_REPO_POM, _PACKAGED_POM), "Kafka")


def find_executable(name: str, env_home: str | None = None) -> str:
    if env_home and os.environ.get(env_home):
        candidate = Path(os.environ[env_home]) / "bin" / name
        if candidate.is_file():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise InfrastructureError(
            f"`{name}` is not on PATH; olstream needs Java 17 and Maven (Kafka, MirrorMaker 2)"
        )
    return found


def resolve_with_maven(libs: Path, pom: Path, options: list[str], marker: str, what: str) -> Path:
    """`libs`, filled once by `mvn dependency:copy-dependencies` of `pom` and cached (`.complete`).

    `options` are Maven's (-Dname=value, -P profile); `marker` is a jar that must be there after.
    Concurrent callers wait on a file lock; a failed run leaves nothing behind.
    """
    if (libs / ".complete").exists():
        return libs
    with process.file_lock(libs.parent / ".lock"):
        if (libs / ".complete").exists():
            return libs
        mvn = find_executable("mvn", "MAVEN_HOME")
        staging = libs.parent / f"libs.staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(pom),
            *options,
            f"-Doutput.dir={staging}",
            "dependency:copy-dependencies",
        ]
        log.info("resolving %s jars from Maven Central into %s", what, libs)
        started = time.monotonic()
        result = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            output = "\n".join((result.stdout + result.stderr).splitlines()[-LOG_TAIL_LINES:])
            raise InfrastructureError(f"Maven could not resolve {what}:\n{output}")
        if not (staging / marker).is_file():
            raise InfrastructureError(f"Maven ran but {marker} is not in {staging}")
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        (libs / ".complete").touch()
        log.info("resolved %s in %.1f s", what, time.monotonic() - started)
    return libs


def resolve_jars(version: str) -> Path:
    """The broker's classpath directory, resolved with Maven once per version and cached."""
    options = [f"-Dkafka.version={version}", "-P", logging_profile(version)]
    return resolve_with_maven(
        jar_cache_dir(version), pom_path(), options, f"kafka_2.13-{version}.jar", f"Kafka {version}"
    )


def java_and_classpath(version: str) -> tuple[str, str]:
    java = find_executable("java", "JAVA_HOME")
    return java, str(resolve_jars(version) / "*")
