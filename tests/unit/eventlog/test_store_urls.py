"""Event-log URLs name the store and the file (no I/O)."""

from __future__ import annotations

from pathlib import Path

import pytest

from olstream.eventlog.sqlite_store import path_from_url
from olstream.eventlog.stores import open_store


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///var/lib/olstream/events.db", Path("/var/lib/olstream/events.db")),
        ("sqlite:////var/lib/olstream/events.db", Path("/var/lib/olstream/events.db")),
        ("sqlite:events.db", Path("events.db")),
        ("sqlite:data/events.db?mode=rw", Path("data/events.db")),
    ],
)
def test_sqlite_urls_name_a_file(url: str, path: Path) -> None:
    assert path_from_url(url) == path


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:", "sqlite:///", "sqlite://host/x.db", "postgres-ish:/x"]
)
def test_bad_sqlite_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        path_from_url(url)


def test_unknown_schemes_are_refused() -> None:
    with pytest.raises(ValueError, match="unsupported event-log URL 'mysql://x'"):
        open_store("mysql://x")
