"""`pip install .` into a fresh virtualenv: one import package, `olstream`, and the `olstream` command."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from olstream.devkit.process import free_port
from olstream.shared.extras import EXTRA_OF
from tests.support.paths import REPO, shared_marquez_jar

IMPORT_EVERY_MODULE = """
import importlib, pkgutil, sys
import olstream
assert olstream.__file__.startswith(sys.prefix), olstream.__file__
names = [m.name for m in pkgutil.walk_packages(olstream.__path__, "olstream.")
         if not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
for foreign in ("connectors", "streams"):
    try:
        importlib.import_module(foreign)
    except ModuleNotFoundError:
        pass
    else:
        raise SystemExit(f"{foreign} is importable on its own")
print(len(names))
"""


def _run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd}: {out.stdout}\n{out.stderr}"
    return out


def test_the_wheel_installs_one_package_and_the_command_into_a_fresh_virtualenv(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("OLSTREAM_")}
    wheels = tmp_path / "wheels"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(REPO),
        ],
        tmp_path,
        env,
    )
    (wheel,) = wheels.glob("olstream-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"olstream", wheel.name.split("-py")[0] + ".dist-info"}
    for packaged in (
        "olstream/contract/avro/RunStarted.avsc",
        "olstream/contract/avro/history/RunStarted.v2.avsc",
        "olstream/streams/schemas/WorkflowRunFacet.json",
        "olstream/streams/runtime/agent.py",
        "olstream/connectors/sink/sink.py",
        "olstream/devkit/kafka_pom.xml",
        "olstream/devkit/mirror_pom.xml",
        "olstream/devkit/marquez_pom.xml",
        "olstream/devkit/marquez.yml",
    ):
        assert packaged in names, packaged

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    python, command = venv / "bin" / "python", venv / "bin" / "olstream"
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp_path, env)
    # the dependencies come from this interpreter's site-packages, added as a plain path: its .pth
    # files (the editable install of the checkout) are not read, so only the wheel's olstream is seen
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     tmp_path, env).stdout.strip())  # fmt: skip
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    assert int(_run([str(python), "-c", IMPORT_EVERY_MODULE], tmp_path, env).stdout) > 60
    assert "source" in _run([str(command), "--help"], tmp_path, env).stdout
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    simulated = _run([str(command), "log", "simulate", "--log", log_url, "--runs", "3"], tmp_path, env)
    assert "event log" in simulated.stdout  # the writer found the packaged Avro schemas
    _run([str(command), "worker", "--print-config"], tmp_path, env)


# --- the wheel with its real dependencies, outside the checkout -------------------------------------

DISTRIBUTION_OF = {
    # a third-party module the package imports -> the distribution the wheel must require for it
    "aiohttp": "aiohttp",
    "aiokafka": "aiokafka",
    "confluent_kafka": "confluent-kafka",
    "fastavro": "fastavro",
    "faust": "faust-streaming",
    "rocksdict": "faust-streaming",  # faust-streaming[rocksdict]
    "graphviz": "graphviz",
    "idna": "idna",
    "prometheus_client": "prometheus-client",
    "psycopg": "psycopg",
    "rich": "rich",
    "yaml": "pyyaml",
    "yarl": "yarl",
}

BROUGHT_BY: dict[str, tuple[str, set[str]]] = {
    # a module only an extra installs (olstream.shared.extras.EXTRA_OF) -> the requirement, under that
    # extra's marker, that brings it: a distribution and the extras of it it needs
    "graphviz": ("graphviz", set()),
    "authlib": ("confluent-kafka", {"schemaregistry"}),  # confluent-kafka[schemaregistry]
}

HELP_OF_EVERY_COMMAND = """
import argparse, contextlib, io, json
from olstream.cli.main import build_parser, main

def paths(parser, path):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path
    for action in subs:
        for name, sub in action.choices.items():
            yield from paths(sub, [*path, name])

helps = {}
for path in paths(build_parser(), []):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main([*path, "--help"])
        except SystemExit as e:
            assert e.code == 0, (path, e.code)
    helps[" ".join(path)] = out.getvalue()
print(json.dumps(helps))
"""


@dataclass(frozen=True)
class Installed:
    """The wheel installed with its real dependencies into a virtualenv outside the checkout."""

    wheel: Path
    python: Path
    command: Path
    work: Path  # the working directory of every command: outside the checkout
    env: dict[str, str]
    seconds: float  # how long `pip install WHEEL` took (pip's own download cache is kept)

    def run(self, *args: str, timeout: float = 300, extra: dict[str, str] | None = None) -> str:
        return _run([str(self.command), *args], self.work, {**self.env, **(extra or {})}, timeout).stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("installed")
    assert REPO not in root.parents
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("OLSTREAM_")
    }
    wheels = root / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
          str(wheels), str(REPO)], root, env)  # fmt: skip
    (wheel,) = wheels.glob("olstream-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], root, env)
    python = venv / "bin" / "python"
    started = time.monotonic()
    # from the package index, as a user installs it; pip's download cache ($PIP_CACHE_DIR or
    # ~/.cache/pip) keeps a second run fast
    _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)], root, env)
    seconds = time.monotonic() - started
    print(f"pip install {wheel.name} with its dependencies: {seconds:.1f} s")
    work = root / "work"
    work.mkdir()
    return Installed(wheel, python, venv / "bin" / "olstream", work, env, seconds)


def _requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as z:
        (metadata,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        text = z.read(metadata).decode("utf-8")
    return [
        Requirement(line.split(":", 1)[1]) for line in text.splitlines() if line.startswith("Requires-Dist:")
    ]


def _third_party_imports(wheel: Path) -> dict[str, set[str]]:
    """Each top-level module the wheel's modules import that is neither the stdlib's nor olstream's
    -> the modules importing it."""
    found: dict[str, set[str]] = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if not name.endswith(".py"):
                continue
            for node in ast.walk(ast.parse(z.read(name))):
                if isinstance(node, ast.Import):
                    tops = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    tops = [node.module.split(".")[0]]
                else:
                    continue
                for top in tops:
                    if top not in sys.stdlib_module_names and top not in ("olstream", "__future__"):
                        found.setdefault(top, set()).add(name)
    return found


def test_the_wheel_requires_what_the_package_imports_and_local_tools_only_with_the_extra(
    installed: Installed,
) -> None:
    requirements = _requirements(installed.wheel)
    imported = _third_party_imports(installed.wheel)
    unknown = set(imported) - set(DISTRIBUTION_OF)
    assert not unknown, f"imported but not in DISTRIBUTION_OF (add it, and to pyproject.toml): {unknown}"

    runtime = {canonicalize_name(r.name): r for r in requirements if r.marker is None}
    used_by_the_runtime = {DISTRIBUTION_OF[m] for m in imported if m not in EXTRA_OF}
    assert set(runtime) == used_by_the_runtime, "runtime Requires-Dist != what the package imports"
    assert set(EXTRA_OF) == set(BROUGHT_BY), "every extra's module says which requirement brings it"
    for module, extra in EXTRA_OF.items():
        distribution, needs = BROUGHT_BY[module]
        plain = runtime.get(distribution)
        assert plain is None or not needs <= plain.extras, (
            f"{module} comes without the extra `{extra}`: {plain}"
        )
        with_extra = [
            r
            for r in requirements
            if r.marker is not None
            and r.marker.evaluate({"extra": extra})
            and canonicalize_name(r.name) == distribution
            and needs <= r.extras
        ]
        assert with_extra, (
            f"`pip install 'olstream[{extra}]'` must bring {module} ({distribution}{needs or ''})"
        )
    assert "httpx" not in runtime
    faust = next(r for r in requirements if canonicalize_name(r.name) == "faust-streaming")
    assert "rocksdict" in faust.extras


def test_every_command_of_the_installed_wheel_answers_help_and_the_extra_is_named(
    installed: Installed,
) -> None:
    assert "marquez" in installed.run("--help")
    helps = json.loads(_run([str(installed.python), "-c", HELP_OF_EVERY_COMMAND], installed.work,
                            installed.env).stdout)  # fmt: skip
    some = {"source", "worker", "sink", "kafka up", "marquez up", "errors redrive", "explain", "graph"}
    assert some <= set(helps)
    for command, text in helps.items():
        assert text.startswith(f"usage: olstream {command}"), command
        flat = " ".join(text.split())
        assert not re.search(r"Marquez[^.;]*from Maven Central", flat, re.I), (command, flat)
    top = " ".join(installed.run("--help").split())
    assert "marquez run a local Marquez API server from its server jar (--jar: Maven Central does not" in top

    # the local tools' package is not installed with the runtime: the graph says which extra to add
    events = installed.work / "events.jsonl"
    run = {"runId": "01890000-0000-7000-8000-000000000000"}
    event = {"eventType": "COMPLETE", "eventTime": "2026-01-01T00:00:00Z", "job": {"namespace": "ns",
             "name": "daily"}, "run": run}  # fmt: skip
    events.write_text(json.dumps(event) + "\n")
    assert "digraph" in installed.run("graph", str(events), "--dot")
    drawn = subprocess.run([str(installed.command), "graph", str(events), "-o", "g.svg"],
                           cwd=installed.work, env=installed.env, capture_output=True, text=True,
                           timeout=120, check=False)  # fmt: skip
    assert drawn.returncode == 2, drawn.stderr
    assert drawn.stderr.endswith("not installed: pip install 'olstream[local]'\n"), drawn.stderr
    assert len(drawn.stderr.splitlines()) == 1, drawn.stderr


@pytest.mark.integration
def test_the_installed_wheel_runs_kafka_postgres_and_the_demo(installed: Installed) -> None:
    # the extra, as a user adds it: only graphviz comes on top of the runtime
    _run([str(installed.python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
          f"{installed.wheel}[local]"], installed.work, installed.env)  # fmt: skip
    kafka_dir = installed.work / "kafka"
    port = free_port()
    controller = free_port(avoid=frozenset({port}))
    kafka = ("--data-dir", str(kafka_dir))
    try:
        installed.run("kafka", "up", *kafka, "--port", str(port), "--controller-port", str(controller))
        assert "running: yes" in installed.run("kafka", "status", *kafka)
        out = installed.work / "lineage.jsonl"
        summary = installed.run("demo", "--bootstrap", f"127.0.0.1:{port}", "--runs", "20",
                                "--workers", "1", "--partitions", "2", "--seed", "7", "--out", str(out),
                                "--time-limit", "240")  # fmt: skip
        assert out.stat().st_size > 0, summary
        if shutil.which("dot"):
            assert (installed.work / "lineage.svg").stat().st_size > 0, summary
    finally:
        installed.run("kafka", "down", *kafka)

    pg_dir = Path(tempfile.mkdtemp(prefix="olstream-install-pg-"))
    pg_dir.chmod(0o755)  # PostgreSQL runs as the `postgres` account when the tests run as root
    try:
        pg = ("--data-dir", str(pg_dir / "data"), "--port", str(free_port()))
        installed.run("postgres", "up", *pg)
        installed.run("postgres", "status", "--data-dir", str(pg_dir / "data"))
        installed.run("postgres", "down", "--data-dir", str(pg_dir / "data"))
    finally:
        shutil.rmtree(pg_dir, ignore_errors=True)


@pytest.mark.integration
@pytest.mark.marquez
def test_the_installed_wheel_runs_marquez_from_the_shared_jar(installed: Installed) -> None:
    jar = os.environ.get("OLSTREAM_LOCAL_MARQUEZ_JAR") or shared_marquez_jar()
    if jar is None:
        pytest.skip(
            "no Marquez server jar: none in ../shared/marquez/ and OLSTREAM_LOCAL_MARQUEZ_JAR is unset"
        )
    pg_dir = Path(tempfile.mkdtemp(prefix="olstream-install-pg-"))
    pg_dir.chmod(0o755)  # PostgreSQL runs as the `postgres` account when the tests run as root
    # `marquez up` keeps its database on the local `olstream postgres` (started when not running)
    local_pg = {
        "OLSTREAM_LOCAL_POSTGRES_DATA_DIR": str(pg_dir / "data"),
        "OLSTREAM_LOCAL_POSTGRES_PORT": str(free_port()),
    }
    api = free_port()
    marquez = ("--data-dir", str(installed.work / "marquez"))
    try:
        admin = free_port(avoid=frozenset({api}))
        up = installed.run("marquez", "up", "--jar", jar, *marquez, "--port", str(api),
                           "--admin-port", str(admin), extra=local_pg)  # fmt: skip
        assert f"Marquez API at http://127.0.0.1:{api}" in up
        # the packaged template was rendered: the request log is its addition to Marquez's config
        assert "marquez-requests.log" in (installed.work / "marquez" / "marquez.yml").read_text()
        status = installed.run("marquez", "status", *marquez)  # the URL `up` kept in the data dir
        assert "running" in status and f"at http://127.0.0.1:{api};" in status  # and the API answers
        assert "stopped" in installed.run("marquez", "down", *marquez)
    finally:
        installed.run("marquez", "down", *marquez)
        installed.run("postgres", "down", extra=local_pg)
        shutil.rmtree(pg_dir, ignore_errors=True)
