"""Rendered pods as local processes: what a kubelet would start, from the objects `helm template` gave.

For each replica of each Deployment and StatefulSet, and each bare Pod (the `helm test` hooks:
`hook_pod_processes`), its one container becomes a process:

- the program: the container's `command`, else the image's ENTRYPOINT (the Dockerfile's), then its
  `args`; `olstream` is the test virtualenv's;
- the environment: the image's ENV (the Dockerfile's, such as OLSTREAM_METRICS_HOST), then the
  container's `env` (plain values, `secretKeyRef` from the test's Secrets, `configMapKeyRef`,
  `fieldRef` metadata.name/namespace); nothing OLSTREAM_* or OPENLINEAGE_* leaks in from the test;
- the files: each volume mount is a directory of the pod (ConfigMap and Secret keys written as
  files, an emptyDir, the StatefulSet's claim per replica), and the container paths that mounted
  files, variables and arguments name are rewritten to those directories: a path the chart names
  that no volume mounts stays a path into the (absent, read-only) image and fails;
- the working directory: the container's, else the image's WORKDIR (a directory of the pod).

Pods have a network of their own, this host one: a replica after the first of the same pod gets
its metrics port moved with OLSTREAM_METRICS_PORT (which wins over the config file); the first
serves where the chart says.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olstream.devkit.process import free_port
from tests.support.stream_support import REPO, tail

DOCKERFILE = REPO / "Dockerfile"
OLSTREAM_BIN = Path(sys.executable).parent / "olstream"

Secrets = dict[str, dict[str, str]]


@dataclass(frozen=True)
class Image:
    env: dict[str, str]
    entrypoint: list[str]
    workdir: str


def image_of_dockerfile(path: Path = DOCKERFILE) -> Image:
    """The final stage's ENV, ENTRYPOINT and WORKDIR."""
    env: dict[str, str] = {}
    entrypoint: list[str] = []
    workdir = "/"
    for line in path.read_text().splitlines():
        words = line.strip().split(None, 1)
        if len(words) < 2:
            continue
        instruction, rest = words[0].upper(), words[1]
        if instruction == "FROM":
            env, entrypoint, workdir = {}, [], "/"
        elif instruction == "ENV":
            for pair in rest.split():
                key, _, value = pair.partition("=")
                env[key] = value
        elif instruction == "ENTRYPOINT":
            entrypoint = json.loads(rest)
        elif instruction == "WORKDIR":
            workdir = rest
    return Image(env, entrypoint, workdir)


@dataclass
class PodProcess:
    pod: str
    workload: dict[str, Any]
    container: dict[str, Any]
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log: Path
    metrics_port: int | None  # where /healthz is probed (the probe's port, or the moved one)
    proc: subprocess.Popen[bytes] | None = None
    mounts: dict[str, Path] = field(default_factory=dict)

    @property
    def grace(self) -> float:
        spec = self.workload["spec"]
        spec = spec.get("template", {}).get("spec", spec)  # a workload's pod template, or a bare Pod
        return float(spec.get("terminationGracePeriodSeconds", 30))

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_running(self) -> None:
        assert self.running(), (
            f"{self.pod} exited {self.proc and self.proc.returncode}:\n{tail(self.log, 60)}"
        )

    def healthz(self) -> int | None:
        assert self.metrics_port is not None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/healthz", timeout=2) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except OSError:
            return None

    def stop(self) -> int:
        """SIGTERM, as the kubelet sends; the exit code, or an AssertionError after the grace period."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(self.grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError(f"{self.pod} outlived its grace period of {self.grace} s") from None


class PodFiles:
    """A pod's mounts: container path -> a directory of the test, and the rewriting of paths."""

    def __init__(self, root: Path, image: Image) -> None:
        self.root = root
        self.image = image
        self.mounts: dict[str, Path] = {}

    def host(self, text: str) -> str:
        """`text` with every container path under a mount as the test's path (in one pass: a
        replacement is never replaced again)."""
        if not self.mounts:
            return text
        mounts = {m.rstrip("/") or "/": h for m, h in self.mounts.items()}
        alternatives = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
        pattern = re.compile(r"(?<![\w./-])(" + alternatives + r")(?=/|$|[\s\"',;])")
        return pattern.sub(lambda m: str(mounts[m.group(1)]), text)

    def path(self, container_path: str) -> Path:
        mapped = self.host(container_path)
        if mapped != container_path:
            return Path(mapped)
        return self.root / "image" / container_path.lstrip("/")  # the image's own (read-only) files


def _data_of(
    volume: dict[str, Any], configmaps: dict[str, dict[str, str]], secrets: Secrets
) -> dict[str, str]:
    if "configMap" in volume:
        source, name, pool = volume["configMap"], volume["configMap"]["name"], configmaps
    else:
        source, name, pool = volume["secret"], volume["secret"]["secretName"], secrets
    assert name in pool, (
        f"volume {volume['name']}: no {'ConfigMap' if pool is configmaps else 'Secret'} {name}"
    )
    data = pool[name]
    items = source.get("items")
    if not items:
        return dict(data)
    out = {}
    for item in items:
        assert item["key"] in data, f"volume {volume['name']}: {name} has no key {item['key']}"
        out[item["path"]] = data[item["key"]]
    return out


def pod_processes(
    objects: list[dict[str, Any]], secrets: Secrets, root: Path, image: Image | None = None
) -> list[PodProcess]:
    """Every replica of every rendered workload as a process to start (not started)."""
    image = image or image_of_dockerfile()
    configmaps = _configmaps(objects)
    used_ports: set[int] = set()
    out: list[PodProcess] = []
    for workload in (o for o in objects if o["kind"] in ("Deployment", "StatefulSet")):
        name = workload["metadata"]["name"]
        claims = {c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])}
        for replica in range(int(workload["spec"].get("replicas", 1))):
            pod = f"{name}-{replica}" if workload["kind"] == "StatefulSet" else f"{name}-{replica}x7k2q"
            out.append(_process(pod, workload, workload["spec"]["template"]["spec"], claims, configmaps,
                                secrets, root, image, used_ports))  # fmt: skip
    return out


def hook_pod_processes(
    objects: list[dict[str, Any]], secrets: Secrets, root: Path, image: Image | None = None
) -> list[PodProcess]:
    """Every rendered Pod (the `helm test` hooks) as a process to start (not started)."""
    image = image or image_of_dockerfile()
    configmaps = _configmaps(objects)
    return [
        _process(o["metadata"]["name"], o, o["spec"], set(), configmaps, secrets, root, image, set())
        for o in objects
        if o["kind"] == "Pod"
    ]


def _configmaps(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {o["metadata"]["name"]: o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"}


def _process(
    pod: str,
    workload: dict[str, Any],
    template: dict[str, Any],
    claims: set[str],
    configmaps: dict[str, dict[str, str]],
    secrets: Secrets,
    root: Path,
    image: Image,
    used_ports: set[int],
) -> PodProcess:
    """One pod's one container as a process (a replica of a workload, or a bare Pod)."""
    (container,) = template["containers"]
    pod_dir = root / pod
    files = PodFiles(pod_dir, image)
    volumes = {v["name"]: v for v in template.get("volumes", [])}
    written: list[tuple[Path, str]] = []
    for mount in container.get("volumeMounts", []):
        vname = mount["name"]
        host = pod_dir / "volumes" / vname
        host.mkdir(parents=True, exist_ok=True)
        if vname in claims:
            pass  # the replica's own claim
        else:
            assert vname in volumes, f"{pod}: mount of an undeclared volume {vname}"
            volume = volumes[vname]
            if "configMap" in volume or "secret" in volume:
                for key, text in _data_of(volume, configmaps, secrets).items():
                    written.append((host / key, text))
            else:
                assert "emptyDir" in volume, f"{pod}: volume {vname} of a kind this test cannot map"
        files.mounts[mount["mountPath"]] = host / mount.get("subPath", "")
    for path, text in written:  # after every mount is known: the files name each other
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files.host(text))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLSTREAM_", "OPENLINEAGE"))}
    env.update({"PYTHONPATH": str(REPO), "HOME": str(files.path("/var/lib/olstream"))})
    env.update(image.env)
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = files.host(str(var["value"]))
            continue
        ref = var["valueFrom"]
        if "secretKeyRef" in ref:
            s = ref["secretKeyRef"]
            assert s["key"] in secrets.get(s["name"], {}), (
                f"{pod}: {var['name']} from Secret {s['name']}/{s['key']}: none"
            )
            env[var["name"]] = secrets[s["name"]][s["key"]]
        elif "configMapKeyRef" in ref:
            c = ref["configMapKeyRef"]
            env[var["name"]] = files.host(configmaps[c["name"]][c["key"]])
        else:
            field_path = ref["fieldRef"]["fieldPath"]
            env[var["name"]] = {"metadata.name": pod, "metadata.namespace": "lineage"}[field_path]
    program = [*(container.get("command") or image.entrypoint), *container.get("args", [])]
    argv = [files.host(a) for a in program]
    if argv[0] == "olstream":
        argv[0] = str(OLSTREAM_BIN)
    cwd = files.path(container.get("workingDir") or image.workdir)
    cwd.mkdir(parents=True, exist_ok=True)
    Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
    port = _probe_port(container)
    if port is not None and port in used_ports:  # a second replica of this pod on this host
        port = free_port()
        env["OLSTREAM_METRICS_PORT"] = str(port)
    if port is not None:
        used_ports.add(port)
    return PodProcess(pod, workload, container, argv, env, cwd, root / f"{pod}.log", port,
                      mounts=dict(files.mounts))  # fmt: skip


def _probe_port(container: dict[str, Any]) -> int | None:
    probe = container.get("livenessProbe")
    if probe is None:
        return None
    port = probe["httpGet"]["port"]
    if isinstance(port, int):
        return port
    (match,) = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    return int(match)


def wait_healthy(processes: list[PodProcess], timeout: float) -> None:
    """Every process answers 200 on /healthz at its probe's port (its startup probe's question)."""
    deadline = time.monotonic() + timeout
    pending = [p for p in processes if p.metrics_port is not None]
    while pending:
        for p in processes:
            p.check_running()
        pending = [p for p in pending if p.healthz() != 200]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                "no 200 on /healthz within {:.0f} s: {}\n{}".format(
                    timeout,
                    [(p.pod, p.metrics_port, p.healthz()) for p in pending],
                    "\n".join(f"--- {p.pod}\n{tail(p.log, 30)}" for p in pending),
                )
            )
        time.sleep(0.5)
