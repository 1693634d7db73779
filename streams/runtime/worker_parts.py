"""What a worker process is built of: its Kafka clients, its run table, its run directory, its input
order, and the chain of steps (``olstream.streams.runtime.chain``), each part given everything it
uses in its constructor.

`build_worker_parts` builds them once per process, the chain last step first, each step handed the
next. Under exactly_once the worker has one transactional producer for its life
(``olstream.streams.runtime.transactions``): the record's events, its error records, the batch's
changelog writes and the input offsets all go into its open transaction. The agent
(``olstream.streams.runtime.agent``) hands records and the life-cycle calls to the chain's first
step, and asks the input order, the table and the offsets what its timers need.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from olstream.contract import topics
from olstream.streams.input_record import InputRecord
from olstream.streams.runtime import faust_private
from olstream.streams.runtime.app import StreamApp
from olstream.streams.runtime.apply_record import ApplyRecord
from olstream.streams.runtime.chain import ChainReport, Step
from olstream.streams.runtime.changelog import ChangelogWriter
from olstream.streams.runtime.checkpoint import BatchCheckpoint, Checkpoint
from olstream.streams.runtime.directory_reader import DirectoryReader, kept_directory
from olstream.streams.runtime.disk_run_starts import DiskRunStarts
from olstream.streams.runtime.group_member import GroupMember, check_metadata_format
from olstream.streams.runtime.input_offsets import InputOffsets
from olstream.streams.runtime.input_order import AdmitInOrder, InputOrder
from olstream.streams.runtime.mark_judge import JudgeMarks
from olstream.streams.runtime.member_gate import MemberGate
from olstream.streams.runtime.parent_wait import ParentWait
from olstream.streams.runtime.rejects import ErrorRecords
from olstream.streams.runtime.run_store import RunStore
from olstream.streams.runtime.run_table import RunTable
from olstream.streams.runtime.send_events import SendEvents
from olstream.streams.runtime.sender import EventSends, Sender
from olstream.streams.runtime.standby import standby_states
from olstream.streams.runtime.topology import changelog_topic
from olstream.streams.runtime.transactions import WorkerTransactions
from olstream.streams.runtime.worker_identity import WorkerIdentity, claim


@dataclass(frozen=True)
class WorkerParts:
    """The parts of one worker process; `head` is the chain's first step."""

    sa: StreamApp
    input_offsets: InputOffsets  # the group's committed offsets and the input's watermarks
    order: InputOrder  # the input ledgers' one owner, and the commit bookkeeping
    table: RunTable
    changelog: ChangelogWriter
    store: RunStore
    starts: DiskRunStarts | None  # the run directory's disk copy (None: kept in memory)
    reader: DirectoryReader  # reads the records topic into the run directory, on its own thread
    report: ChainReport  # what the steps report (records batched, seconds spent)
    head: Step[InputRecord]
    identity: WorkerIdentity | None  # exactly_once: holds the data dir's lock for the process's life

    def close(self) -> None:
        """Release what outlives faust's worker: the standby's thread and copies, the changelog's
        producer (nothing is left to send by then), the directory reader's thread, then its store."""
        self.store.standby.close()
        self.changelog.close()
        if self.reader.close() and self.starts is not None:  # the thread no longer touches the store
            self.starts.close()


def owned_input_tps(sa: StreamApp) -> set[Any]:
    """The input topic's partitions currently assigned to this worker."""
    topic, owned = sa.settings.input_topic, set()
    for tp in sa.app.consumer.assignment():
        if tp.topic == topic:
            owned.add(tp)
    return owned


def worker_transactions(
    sa: StreamApp, input_offsets: InputOffsets, identity: WorkerIdentity, sized: dict[str, Any]
) -> WorkerTransactions:
    """exactly_once: the worker's transactional producer (its id kept in the data dir, which this
    process locks), sending the offsets with faust's member's own generation (KIP-447). Its
    transactions time out a second before the session timeout (at least twice the batch's age
    limit): a worker killed and not restarted holds read_committed readers of its output for at
    most that, plus the broker's abort check interval (10 s by default), plus the age of its
    transaction when it died (one batch)."""
    settings = sa.settings
    check_metadata_format(settings.app_id, input_offsets.group_metadata())
    member = GroupMember(settings.app_id, lambda: faust_private.group_member(sa.app.consumer))
    return WorkerTransactions(
        settings.connection,
        identity.transactional_id(settings.app_id),
        settings.input_topic,
        member.metadata,
        transaction_timeout=max(settings.session_timeout - 1.0, 2 * settings.batch_within),
        extra=sized,
    )


def build_worker_parts(sa: StreamApp) -> WorkerParts:
    """The worker's parts, and its chain (chain.STEPS), last step first, each step handed the next."""
    settings = sa.settings
    input_offsets = InputOffsets(settings.connection, settings.app_id, settings.input_topic)
    sized = topics.producer_size_config(settings.max_event_bytes)
    sender = Sender(settings.connection, sized)
    order = InputOrder(
        input_offsets,
        lambda: sa.app.consumer,
        settings.input_topic,
        confirm_within=settings.session_timeout / 3,
        fenced_by_transactions=settings.exactly_once,
    )
    changelog = ChangelogWriter(settings.connection, changelog_topic(settings.app_id), sized)
    # exactly_once: the data dir is this process's (its lock held as long as the parts are)
    identity = claim(settings.data_dir) if settings.exactly_once else None
    transactions = None if identity is None else worker_transactions(sa, input_offsets, identity, sized)
    # under exactly_once a record's events and error records go into the worker's transaction
    outputs: EventSends = sender if transactions is None else transactions
    standby = standby_states(settings, changelog.topic, sa.partitions)
    store = RunStore(settings.connection, settings.data_dir, changelog.topic, settings.app_id, standby)
    table = RunTable(settings, store, functools.partial(owned_input_tps, sa))
    starts, directory = kept_directory(settings, sa.partitions)  # a restart reads the tail
    reader = DirectoryReader(
        settings.connection, settings.app_id, settings.input_topic, sa.partitions, directory, sa.framing
    )
    # commits input offsets through faust's consumer (at_least_once), which exists from the app's start
    commit = functools.partial(faust_private.commit_offsets, sa.app.consumer)
    report = ChainReport()
    checkpoint = Checkpoint(
        settings.input_topic, sender, table, changelog, commit, order, report, transactions
    )
    last = BatchCheckpoint(checkpoint, settings.batch_size, settings.batch_within, report)
    send = SendEvents(settings.output_topic, outputs, last)
    apply = ApplyRecord(settings.mapping, table, ErrorRecords(settings, outputs), send)
    gate = MemberGate(settings.input_topic, order, table, transactions, commit, report, JudgeMarks(apply))
    wait = ParentWait(settings.mapping, settings.max_event_bytes, directory, reader, order, gate)
    head = AdmitInOrder(order, wait)
    return WorkerParts(
        sa, input_offsets, order, table, changelog, store, starts, reader, report, head, identity
    )
