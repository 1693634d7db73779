"""The worker and a grown input: which partitions are new, and the exit that names them."""

from __future__ import annotations

import logging

import pytest

from olstream.shared.errors import ExitCode
from olstream.streams.runtime import topology
from olstream.streams.runtime.app import build_app
from olstream.streams.settings import WorkerSettings


def test_only_partitions_beyond_the_start_count_are_grown() -> None:
    assert topology.grown_partitions([0, 1, 2], 3) == []
    assert topology.grown_partitions([5, 1, 3], 3) == [3, 5]


def test_a_grown_assignment_leaves_with_input_grew_and_names_topic_and_counts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(topology.os, "_exit", fake_exit)
    topology.check_assignment("olstream.eventlog", [0, 1], 3)  # nothing new: stays
    assert exits == []
    with caplog.at_level(logging.CRITICAL), pytest.raises(SystemExit):
        topology.check_assignment("olstream.eventlog", [2, 4], 3)
    assert exits == [ExitCode.INPUT_GREW]
    text = caplog.records[-1].getMessage()
    assert "olstream.eventlog grew from 3 partitions to at least 5" in text and "restart" in text


def test_the_changelog_name_is_the_one_faust_gives_the_table(tmp_path: object) -> None:
    settings = WorkerSettings(app_id="olstream-x", data_dir=str(tmp_path))
    sa = build_app(settings, 3)
    assert sa.table.changelog_topic.get_topic_name() == topology.changelog_topic("olstream-x")
