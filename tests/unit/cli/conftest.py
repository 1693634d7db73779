"""Every CLI unit test starts from an environment without olstream's or OpenLineage's variables."""

from __future__ import annotations

import os

import pytest

from olstream.shared import logs


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("OLSTREAM_", "OPENLINEAGE_")):
            monkeypatch.delenv(name)
    # secrets registered by earlier tests (the local PostgreSQL's password is "olstream") would
    # redact the paths and values these tests look for
    monkeypatch.setattr(logs, "_SECRETS", set())
