"""`pip install .` into a fresh virtualenv: one import package, `olstream`, and the `olstream` command."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from tests.support.paths import REPO

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


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
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
        "olstream/infra/kafka_pom.xml",
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
