"""A real Prometheus (Debian's `prometheus` package) for the alert tests: its own temp dir and port,
scraping given targets every second and evaluating deploy/prometheus's rules every second.

It writes its pid to `prometheus.pid` in its folder, so that `infra/run-tests.sh` stops it even when
pytest is killed before the fixture's own stop runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from olstream.devkit.process import free_port
from tests.support.promql import RULES

PID_FILE = "prometheus.pid"  # infra/run-tests.sh looks for this name


def quick_rules(dest: Path, for_: str = "2s") -> Path:
    """deploy/prometheus's rules with every `for:` cut to `for_` and each group evaluated every second;
    the expressions, labels and annotations as shipped."""
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            rule["for"] = for_
    dest.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return dest


class Prometheus:
    """`prometheus` in `work`: start(), then alerts() and query(); stop() (also a context manager)."""

    def __init__(self, work: Path, targets: Mapping[str, Sequence[str]], rules: Path) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.skip("prometheus is not installed (Debian's prometheus package; `make setup` installs it)")
        self.binary = binary
        self.work = work
        self.targets = targets
        self.rules = rules
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.work / "prometheus.log"

    def config(self) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(self.rules)],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": list(targets)}]}
                for job, targets in self.targets.items()
            ],
        }

    def start(self, timeout: float = 30.0) -> Prometheus:
        self.work.mkdir(parents=True, exist_ok=True)
        config = self.work / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config(), sort_keys=False), encoding="utf-8")
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.work / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        (self.work / PID_FILE).write_text(f"{self.proc.pid}\n", encoding="utf-8")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready after {timeout} s:\n{self.tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        (self.work / PID_FILE).unlink(missing_ok=True)

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=5) as answer:
            doc = json.loads(answer.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts (`/api/v1/alerts`)."""
        found: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return found

    def firing(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.alerts() if a["labels"]["alertname"] == name and a["state"] == "firing"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector: [{"metric": {...}, "value": [t, "v"]}, ...]."""
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result
