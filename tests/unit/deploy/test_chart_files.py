"""The Helm chart's files/ are copies of deploy/prometheus/olstream-rules.yml and
deploy/grafana/olstream-dashboard.json (copies, not links: helm warns about a symbolic link on
every call). A copy that differs from its source fails here, with the command that refreshes it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FILES = ROOT / "deploy" / "helm" / "olstream" / "files"
COPIES = {
    "olstream-rules.yml": ROOT / "deploy" / "prometheus" / "olstream-rules.yml",
    "olstream-dashboard.json": ROOT / "deploy" / "grafana" / "olstream-dashboard.json",
}


def test_files_holds_only_the_copies() -> None:
    assert sorted(p.name for p in FILES.iterdir()) == sorted(COPIES)


@pytest.mark.parametrize("name", sorted(COPIES))
def test_each_copy_equals_its_source(name: str) -> None:
    copy, source = FILES / name, COPIES[name]
    assert not copy.is_symlink(), f"{copy} is a link: helm warns about it on every call; copy the file"
    assert copy.read_bytes() == source.read_bytes(), (
        f"{copy.relative_to(ROOT)} differs from {source.relative_to(ROOT)}: "
        f"cp {source.relative_to(ROOT)} {copy.relative_to(ROOT)}"
    )
