"""A real single-node Apache Kafka broker (KRaft), resolved from Maven Central and run locally."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from olstream.infra import process
from olstream.infra.kafka_config import (
    TOOL_OPTS,
    KafkaSettings,
    jar_cache_dir,
    java_command,
    logging_config,
    logging_profile,
    random_cluster_id,
    render_properties,
    server_properties,
)
from olstream.shared.errors import InfrastructureError
from olstream.shared.kafka_clients import client_config

log = logging.getLogger(__name__)
# librdkafka's own connection chatter while polling for readiness is not worth showing.
_admin_log = logging.getLogger(__name__ + ".admin")
_admin_log.setLevel(logging.CRITICAL)

STATE_FILE = "broker.json"
LOG_TAIL_LINES = 40
_REPO_POM = Path(__file__).resolve().parents[2] / "infra" / "kafka" / "pom.xml"
_PACKAGED_POM = Path(__file__).resolve().with_name("kafka_pom.xml")
# Brokers started by this process, kept so they are reaped (and not warned about) when stopped.
_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class BrokerState:
    """What `up` records in <data-dir>/broker.json about the broker it started."""

    pid: int
    version: str
    host: str
    port: int
    controller_port: int
    data_dir: str
    started_at: float

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    data_dir: Path
    state: BrokerState | None


def pom_path() -> Path:
    """infra/kafka/pom.xml of the source tree (or the copy shipped inside the wheel)."""
    for candidate in (_REPO_POM, _PACKAGED_POM):
        if candidate.is_file():
            return candidate
    raise InfrastructureError(f"cannot find the Kafka pom (looked at {_REPO_POM} and {_PACKAGED_POM})")


def find_executable(name: str, env_home: str | None = None) -> str:
    if env_home and os.environ.get(env_home):
        candidate = Path(os.environ[env_home]) / "bin" / name
        if candidate.is_file():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise InfrastructureError(f"`{name}` is not on PATH; olstream needs Java 17 and Maven for Kafka")
    return found


def resolve_jars(version: str) -> Path:
    """The broker's classpath directory, resolved with Maven once per version and cached."""
    libs = jar_cache_dir(version)
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
            str(pom_path()),
            f"-Dkafka.version={version}",
            "-P",
            logging_profile(version),
            f"-Doutput.dir={staging}",
            "dependency:copy-dependencies",
        ]
        log.info("resolving Kafka %s jars from Maven Central into %s", version, libs)
        started = time.monotonic()
        result = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            output = "\n".join((result.stdout + result.stderr).splitlines()[-LOG_TAIL_LINES:])
            raise InfrastructureError(f"Maven could not resolve Kafka {version}:\n{output}")
        if not (staging / f"kafka_2.13-{version}.jar").is_file():
            raise InfrastructureError(f"Maven ran but kafka_2.13-{version}.jar is not in {staging}")
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        (libs / ".complete").touch()
        log.info("resolved Kafka %s in %.1f s", version, time.monotonic() - started)
    return libs


def read_state(data_dir: Path) -> BrokerState | None:
    return process.read_state_file(data_dir / STATE_FILE, BrokerState, "broker")


def _write_state(data_dir: Path, state: BrokerState) -> None:
    tmp = data_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2) + "\n")
    tmp.replace(data_dir / STATE_FILE)


def _is_our_broker(state: BrokerState) -> bool:
    """The recorded pid is alive and is the broker of this data dir (not a recycled pid)."""
    child = _children.get(state.pid)
    if child is not None and child.poll() is not None:
        return False
    if not process.pid_alive(state.pid):
        return False
    cmdline = process.pid_cmdline(state.pid)
    if not cmdline:
        return True
    config = str(Path(state.data_dir) / "config" / "server.properties")
    return "kafka.Kafka" in cmdline and config in cmdline


def broker_status(data_dir: Path) -> BrokerStatus:
    state = read_state(data_dir)
    running = state is not None and _is_our_broker(state)
    return BrokerStatus(running=running, data_dir=data_dir, state=state)


def _failure(settings: KafkaSettings, reason: str) -> InfrastructureError:
    lines = [f"Kafka {settings.version} did not start: {reason}"]
    for name in ("server.log", "broker.out"):
        text = process.tail(settings.log_dir / name, LOG_TAIL_LINES)
        if text.strip():
            lines += [f"--- last lines of {settings.log_dir / name} ---", text]
    return InfrastructureError("\n".join(lines))


def _write_config(settings: KafkaSettings) -> None:
    for directory in (settings.config_dir, settings.log_dir, settings.storage_dir):
        directory.mkdir(parents=True, exist_ok=True)
    settings.server_properties.write_text(render_properties(server_properties(settings)))
    settings.logging_config.write_text(logging_config(settings))


def _format_storage(settings: KafkaSettings, java: str, classpath: str) -> None:
    if (settings.storage_dir / "meta.properties").exists():
        return
    cluster_id = random_cluster_id()
    cmd = java_command(
        java,
        settings,
        classpath,
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id,
        "-c",
        str(settings.server_properties),
        "--ignore-formatted",
        jvm_opts=TOOL_OPTS,
    )
    result = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    if result.returncode != 0:
        output = "\n".join((result.stdout + result.stderr).splitlines()[-LOG_TAIL_LINES:])
        raise InfrastructureError(f"formatting Kafka storage in {settings.storage_dir} failed:\n{output}")
    log.info("formatted KRaft storage %s (cluster id %s)", settings.storage_dir, cluster_id)


def _admin_lists_topics(bootstrap: str) -> bool:
    config = client_config(bootstrap, {"logger": _admin_log})
    admin = AdminClient(config)
    try:
        meta = admin.list_topics(timeout=3)
    except Exception:
        return False
    return len(meta.brokers) > 0


def _wait_ready(settings: KafkaSettings, child: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + settings.start_timeout
    while time.monotonic() < deadline:
        code = child.poll()
        if code is not None:
            raise _failure(settings, f"the broker process exited with code {code}")
        if process.port_open(settings.host, settings.port) and _admin_lists_topics(settings.bootstrap):
            return
        time.sleep(0.2)
    raise _failure(
        settings, f"no AdminClient answer at {settings.bootstrap} within {settings.start_timeout:.0f} s"
    )


def start_broker(settings: KafkaSettings) -> tuple[BrokerState, bool]:
    """Start the broker of `settings.data_dir` unless it runs; (state, True when this call started it)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with process.file_lock(settings.data_dir / ".lock"):
        current = read_state(settings.data_dir)
        if current is not None and _is_our_broker(current):
            return current, False
        (settings.data_dir / STATE_FILE).unlink(missing_ok=True)
        for port in (settings.port, settings.controller_port):
            if not process.port_free(settings.host, port):
                raise InfrastructureError(f"port {settings.host}:{port} is already in use by another process")
        java = find_executable("java", "JAVA_HOME")
        classpath = str(resolve_jars(settings.version) / "*")
        _write_config(settings)
        _format_storage(settings, java, classpath)
        cmd = java_command(java, settings, classpath, "kafka.Kafka", str(settings.server_properties))
        with (settings.log_dir / "broker.out").open("ab") as out:
            child = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=settings.data_dir,
                start_new_session=True,
            )
        _children[child.pid] = child
        state = BrokerState(
            pid=child.pid,
            version=settings.version,
            host=settings.host,
            port=settings.port,
            controller_port=settings.controller_port,
            data_dir=str(settings.data_dir),
            started_at=time.time(),
        )
        _write_state(settings.data_dir, state)
        try:
            _wait_ready(settings, child)
        except InfrastructureError:
            process.stop_pid(child.pid, timeout=10)
            _reap(child.pid)
            (settings.data_dir / STATE_FILE).unlink(missing_ok=True)
            raise
        return state, True


def _reap(pid: int) -> None:
    child = _children.pop(pid, None)
    if child is not None:
        child.poll()


def stop_broker(data_dir: Path, timeout: float = 30.0) -> BrokerState | None:
    """Stop exactly the broker recorded in `data_dir` (SIGTERM, SIGKILL after `timeout`)."""
    with process.file_lock(data_dir / ".lock"):
        state = read_state(data_dir)
        if state is None:
            return None
        if _is_our_broker(state):
            killed = process.stop_pid(state.pid, timeout=timeout)
            if killed:
                log.warning("broker pid %d ignored SIGTERM for %.0f s and was killed", state.pid, timeout)
        else:
            state = None
        _reap_finished()
        (data_dir / STATE_FILE).unlink(missing_ok=True)
        return state


def _reap_finished() -> None:
    for pid in list(_children):
        if _children[pid].poll() is not None or not process.pid_alive(pid):
            _reap(pid)
