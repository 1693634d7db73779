"""The worker's name in its data dir (its transactional id under exactly_once): the same after a
restart, new for a fresh data dir, and never shared by two live workers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from olstream.shared.errors import ConfigError
from olstream.streams.runtime.worker_identity import claim


def test_a_restart_on_the_data_dir_keeps_the_name_and_a_fresh_one_gets_another(tmp_path: Path) -> None:
    first = claim(str(tmp_path / "a"))
    tid = first.transactional_id("olstream-stream")
    assert tid.startswith("olstream-stream-worker-")
    first.lock.close()  # the process ended
    again = claim(str(tmp_path / "a"))
    assert again.transactional_id("olstream-stream") == tid
    fresh = claim(str(tmp_path / "b"))
    assert fresh.name != again.name


def test_a_second_live_worker_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    held = claim(str(tmp_path))
    with pytest.raises(ConfigError, match=r"in use by a running worker \(pid \d+\)"):
        claim(str(tmp_path))
    held.lock.close()
    claim(str(tmp_path))  # free again once the first ended


def test_a_dead_process_leaves_the_data_dir_free(tmp_path: Path) -> None:
    code = f"from olstream.streams.runtime.worker_identity import claim; claim({str(tmp_path)!r})"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert claim(str(tmp_path)).name
