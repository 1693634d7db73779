"""Integration tests use the shared fixtures of tests/conftest.py (real Kafka, real PostgreSQL)."""

from __future__ import annotations

import os
import sys

import pytest

from tests.support.paths import REPO


@pytest.fixture(scope="session")
def olstream_cmd() -> list[str]:
    """How to run the `olstream` command in a subprocess (the current interpreter, `-m olstream`)."""
    return [sys.executable, "-m", "olstream"]


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for subprocesses: this repo importable, unbuffered output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env
