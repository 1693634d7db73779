"""A local MirrorMaker 2 (dedicated mode), resolved from Maven Central and run for one flow A -> B.

`start_mirror` starts it (or finds it running) for a data dir and waits until it replicates;
`stop_mirror` stops exactly the process `start_mirror` recorded in <data-dir>/mirror.json;
`mirror_status` says whether it runs. MirrorMaker 2 keeps its positions in the target cluster
(`mm2-offsets.<source>.internal`), so a restart with the same clusters resumes where the last
committed position was (every `offset_flush_interval_ms`): after a kill -9, the records after it
are replicated again (duplicates, never gaps).
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

from olstream.devkit import process
from olstream.devkit.kafka_jars import find_executable, find_pom, resolve_with_maven
from olstream.devkit.launcher import Launcher, ServerStatus, runs_java
from olstream.devkit.mirror_config import (
    MAIN_CLASS,
    MM2_HEADER,
    MirrorSettings,
    Readiness,
    is_secret_key,
    jar_cache_dir,
    java_command,
    logging_config,
    remote_topic,
    render_properties,
    with_files,
)
from olstream.shared.errors import ConfigError, InfrastructureError
from olstream.shared.logs import register_secret

log = logging.getLogger(__name__)

STATE_FILE = "mirror.json"
LOG_TAIL_LINES = 40
_REPO_POM = Path(__file__).resolve().parents[2] / "infra" / "mirror" / "pom.xml"
_PACKAGED_POM = Path(__file__).resolve().with_name("mirror_pom.xml")
# MirrorMakers started by this process, kept so they are reaped when they exit or are stopped.
_children = process.ChildProcesses()


@dataclass(frozen=True)
class MirrorState:
    """What `up` records in <data-dir>/mirror.json about the MirrorMaker 2 it started."""

    pid: int
    version: str
    source_alias: str
    source_bootstrap: str
    target_alias: str
    target_bootstrap: str
    topics: str
    replication_policy: str
    data_dir: str
    started_at: float
    ready_at: float | None = None  # None while it starts

    def remote_topic(self, topic: str) -> str:
        """The name of a source topic's copy on the target."""
        return remote_topic(self.replication_policy, self.source_alias, topic)

    @property
    def ready_seconds(self) -> float | None:
        return None if self.ready_at is None else self.ready_at - self.started_at


MirrorStatus = ServerStatus[MirrorState]


def pom_path() -> Path:
    """infra/mirror/pom.xml of the source tree (or the copy shipped inside the wheel)."""
    return find_pom((_REPO_POM, _PACKAGED_POM), "MirrorMaker")


def resolve_jars(version: str) -> Path:
    """MirrorMaker 2's classpath directory, resolved with Maven once per version and cached."""
    return resolve_with_maven(
        jar_cache_dir(version),
        pom_path(),
        [f"-Dmirror.version={version}"],
        f"connect-mirror-{version}.jar",
        f"connect-mirror {version}",
    )


MIRRORS = Launcher(
    "MirrorMaker",
    STATE_FILE,
    MirrorState,
    runs_java(_children, MAIN_CLASS, "config/mm2.properties"),
    _children,
    log=log,
)
read_state = MIRRORS.read_state
mirror_status = MIRRORS.status


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (mm2.properties may hold the clients' secrets)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="latin-1") as f:
        f.write(text)
    tmp.replace(path)


def _write_config(settings: MirrorSettings) -> None:
    try:
        props = with_files(settings)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    for key, value in props.items():
        if is_secret_key(key):
            register_secret(value)
    for directory in (settings.config_dir, settings.log_dir):
        directory.mkdir(parents=True, exist_ok=True)
    _write_private(settings.mm2_properties, render_properties(props, MM2_HEADER))
    settings.logging_config.write_text(logging_config(settings))


class _LogWatch:
    """Reads the lines MirrorMaker 2 appends to mirror.log from a position on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.position = path.stat().st_size if path.exists() else 0
        self.partial = b""

    def new_lines(self) -> list[str]:
        try:
            with self.path.open("rb") as f:
                if f.seek(0, os.SEEK_END) < self.position:  # rolled over: a new file
                    self.position, self.partial = 0, b""
                f.seek(self.position)
                data = f.read()
        except FileNotFoundError:
            return []
        self.position += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        return [line.decode(errors="replace") for line in lines]


def _failure(settings: MirrorSettings, reason: str, readiness: Readiness) -> InfrastructureError:
    lines = [f"MirrorMaker 2 (connect-mirror {settings.version}) did not start: {reason}"]
    if readiness.problems:
        lines += [f"--- last WARN and ERROR lines of {settings.log_file} ---", *readiness.problems]
    out = process.tail(settings.log_dir / "mirror.out", LOG_TAIL_LINES)
    if out.strip():
        lines += [f"--- last lines of {settings.log_dir / 'mirror.out'} ---", out]
    lines.append(f"(the whole log: {settings.log_file})")
    return InfrastructureError("\n".join(lines))


def _wait_ready(settings: MirrorSettings, child: subprocess.Popen[bytes], watch: _LogWatch) -> None:
    readiness = Readiness()
    deadline = time.monotonic() + settings.start_timeout
    while time.monotonic() < deadline:
        for line in watch.new_lines():
            readiness = readiness.seen(line)
        if readiness.ready:
            return
        code = child.poll()
        if code is not None:
            raise _failure(settings, f"the MirrorMaker process exited with code {code}", readiness)
        time.sleep(0.2)
    waiting = []
    if readiness.partitions is None:
        waiting.append("the source connector's start")
    if not readiness.heartbeats:
        waiting.append("the heartbeat task")
    if readiness.partitions and not readiness.source_task:
        waiting.append("the first replication task")
    reason = f"not replicating within {settings.start_timeout:.0f} s (waiting for {', '.join(waiting)})"
    raise _failure(settings, reason, readiness)


def ensure_mirror(settings: MirrorSettings) -> tuple[MirrorState, bool]:
    """Start the MirrorMaker 2 of `settings.data_dir` unless it runs; (state, True when this call did)."""
    with MIRRORS.starting(settings.data_dir) as current:
        if current is not None:
            return current, False
        _write_config(settings)
        java = find_executable("java", "JAVA_HOME")
        classpath = str(resolve_jars(settings.version) / "*")
        watch = _LogWatch(settings.log_file)
        cmd = java_command(java, settings, classpath)
        child = _children.start(cmd, settings.log_dir / "mirror.out", settings.data_dir)
        state = MirrorState(
            pid=child.pid,
            version=settings.version,
            source_alias=settings.source_alias,
            source_bootstrap=settings.source_bootstrap,
            target_alias=settings.target_alias,
            target_bootstrap=settings.target_bootstrap,
            topics=settings.topics,
            replication_policy=settings.replication_policy,
            data_dir=str(settings.data_dir),
            started_at=time.time(),
        )
        process.write_state_file(settings.data_dir / STATE_FILE, state)
        try:
            _wait_ready(settings, child, watch)
        except InfrastructureError:
            MIRRORS.abandon(child.pid, settings.data_dir)
            raise
        state = replace(state, ready_at=time.time())
        process.write_state_file(settings.data_dir / STATE_FILE, state)
        log.info(
            "MirrorMaker 2 replicates %s -> %s (topics %s) after %.1f s",
            state.source_alias,
            state.target_alias,
            state.topics,
            state.ready_seconds or 0.0,
        )
        return state, True


def start_mirror(settings: MirrorSettings) -> MirrorState:
    """`ensure_mirror` without the flag: the state of the MirrorMaker 2 running for this data dir."""
    return ensure_mirror(settings)[0]


def stop_mirror(data_dir: Path, timeout: float = 30.0) -> MirrorState | None:
    """Stop exactly the MirrorMaker recorded in `data_dir` (SIGTERM, SIGKILL after `timeout`)."""
    return MIRRORS.stop(data_dir, timeout)
