"""The state files and the child-process registry the local services share (real, short processes)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from olstream.devkit import process


@dataclass(frozen=True)
class _State:
    pid: int
    name: str
    ready_at: float | None = None


def test_a_state_file_reads_back_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "service.json"
    process.write_state_file(path, _State(pid=42, name="a"))
    process.write_state_file(path, _State(pid=43, name="b", ready_at=1.5))
    assert process.read_state_file(path, _State, "test") == _State(pid=43, name="b", ready_at=1.5)
    assert json.loads(path.read_text()) == {"pid": 43, "name": "b", "ready_at": 1.5}
    assert path.read_text().endswith("}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["service.json"]


def test_a_started_child_runs_writes_its_output_and_is_reaped_when_it_exits(tmp_path: Path) -> None:
    children = process.ChildProcesses()
    marker = "olstream-test-child"
    script = f"import time; print({marker!r}, flush=True); time.sleep(30)"
    output = tmp_path / "child.out"
    child = children.start([sys.executable, "-c", script, marker], output, tmp_path)
    try:
        deadline = time.monotonic() + 30
        while marker not in output.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker in output.read_text()
        assert children.get(child.pid) is child
        assert children.is_running(child.pid, sys.executable, marker)
        assert not children.is_running(child.pid, "some.other.MainClass")
        children.reap_finished()
        assert children.get(child.pid) is child  # still running: kept
    finally:
        process.stop_pid(child.pid, timeout=10)
    assert not children.is_running(child.pid, marker)
    children.reap_finished()
    assert children.get(child.pid) is None
    assert child.returncode is not None


def test_reaping_forgets_a_child_and_ignores_unknown_pids(tmp_path: Path) -> None:
    children = process.ChildProcesses()
    child = children.start([sys.executable, "-c", "pass"], tmp_path / "child.out", tmp_path)
    child.wait(timeout=30)
    assert not children.is_running(child.pid)
    children.reap(child.pid)
    assert children.get(child.pid) is None
    children.reap(child.pid)  # a second time: nothing to do


def test_a_free_port_run_is_never_ephemeral_so_no_outgoing_connection_can_take_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("32768\t60999\n")
    monkeypatch.setattr(process, "EPHEMERAL_RANGE_FILE", range_file)
    assert process.ephemeral_ports() == range(32768, 61000)
    for _ in range(200):
        port = process.free_port(run=6)
        assert all(p < 32768 or p > 60999 for p in range(port, port + 6))
        assert port >= process.LOWEST_CHOSEN_PORT and port + 5 <= 65535
    range_file.write_text("20000 65535\n")
    with pytest.raises(OSError, match="outside the ephemeral range 20000-65535"):
        process.free_port()
    range_file.write_text("garbage\n")
    assert process.ephemeral_ports() == range(32768, 61000)
