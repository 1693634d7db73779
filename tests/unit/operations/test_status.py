"""Lag arithmetic of `olstream status` (pure)."""

from __future__ import annotations

from olstream.operations.status import GroupLag, PipelineStatus, group_lags, render_tables, topic_ends

ENDS = {("olstream.eventlog", 0): 10, ("olstream.eventlog", 1): 5, ("openlineage.events", 0): 7}


def test_topic_ends_sum_partitions_in_order() -> None:
    rows = topic_ends(ENDS)
    assert [(r.topic, r.partitions, r.end_offsets, r.total) for r in rows] == [
        ("olstream.eventlog", 2, (10, 5), 15),
        ("openlineage.events", 1, (7,), 7),
    ]


def test_group_lag_counts_uncommitted_partitions_as_all_lag() -> None:
    committed = {
        "worker": {("olstream.eventlog", 0): 8},
        "olstream-sink": {("openlineage.events", 0): 7},
        "someone-else": {("unrelated", 0): 3},
    }
    rows = group_lags(ENDS, committed)
    assert rows == [
        GroupLag("olstream-sink", "openlineage.events", committed=7, end=7, partitions_without_commit=0),
        GroupLag("worker", "olstream.eventlog", committed=8, end=15, partitions_without_commit=1),
    ]
    assert [r.lag for r in rows] == [0, 7]


def test_tables_render_with_missing_topics_and_no_groups() -> None:
    from rich.console import Console

    status = PipelineStatus(
        topics=tuple(topic_ends(ENDS)), groups=(), missing_topics=("openlineage.events.dlq",)
    )
    console = Console(record=True, width=120)
    for table in render_tables(status, "127.0.0.1:9092"):
        console.print(table)
    text = console.export_text()
    assert "openlineage.events.dlq" in text and "(not created)" in text and "(none)" in text


def test_group_state_and_members_are_shown() -> None:
    from rich.console import Console

    from olstream.operations.status import GroupState

    lag = GroupLag("worker", "olstream.eventlog", committed=8, end=15, partitions_without_commit=0)
    status = PipelineStatus(
        topics=tuple(topic_ends(ENDS)),
        groups=(lag,),
        missing_topics=(),
        group_states=(("worker", GroupState("STABLE", 2)),),
    )
    assert status.state_of("worker") == GroupState("STABLE", 2)
    assert status.state_of("other") is None
    console = Console(record=True, width=160)
    for table in render_tables(status, "b:9092"):
        console.print(table)
    row = next(line for line in console.export_text().splitlines() if "worker" in line)
    assert "STABLE" in row and " 2 " in row and " 7 " in row


def test_each_partition_of_a_groups_topic_shows_its_records_share_lag_and_owner() -> None:
    from olstream.operations.status import PartitionRow, member_name, partition_rows

    committed = {"worker": {("olstream.eventlog", 0): 8}, "idle": {("unrelated", 0): 1}}
    owners = {"worker": {("olstream.eventlog", 1): member_name("w-2", "/10.0.0.2")}}
    rows = partition_rows(ENDS, committed, owners)
    assert rows == [
        PartitionRow("worker", "olstream.eventlog", 0, end=10, committed=8, owner=None, share=10 / 15),
        PartitionRow(
            "worker", "olstream.eventlog", 1, end=5, committed=-1, owner="w-2@10.0.0.2", share=5 / 15
        ),
    ]
    assert [r.lag for r in rows] == [2, 5]


def test_the_partition_table_names_owners_and_unassigned_partitions() -> None:
    from rich.console import Console

    from olstream.operations.status import PartitionRow

    status = PipelineStatus(
        topics=tuple(topic_ends(ENDS)),
        groups=(),
        missing_topics=(),
        partitions=(
            PartitionRow("worker", "olstream.eventlog", 0, end=10, committed=8, owner="w-1@h", share=2 / 3),
            PartitionRow("worker", "olstream.eventlog", 1, end=5, committed=-1, owner=None, share=1 / 3),
        ),
    )
    console = Console(record=True, width=200)
    for table in render_tables(status, "b:9092"):
        console.print(table)
    text = console.export_text()
    assert "w-1@h" in text and "(unassigned)" in text and "66.7%" in text and "33.3%" in text
