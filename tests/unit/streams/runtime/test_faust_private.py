"""The faust-streaming private names the worker relies on (``streams/runtime/faust_private.py``) exist."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Iterator
from pathlib import Path

import faust.streams
import faust.transport.consumer
import pytest
from faust.types import TP

from olstream.shared.errors import ConfigError
from olstream.streams.runtime import faust_private
from olstream.streams.runtime.app import build_app
from olstream.streams.runtime.faust_private import (
    ALL_NAMES,
    PrivateName,
    check_faust_private_names,
    missing_private_names,
)
from olstream.streams.settings import WorkerSettings

RUNTIME = Path(faust_private.__file__).parent


@pytest.fixture(autouse=True)
def _event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """faust's services bind to the current event loop when created."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


def test_the_installed_faust_has_every_private_name_the_worker_relies_on() -> None:
    missing = missing_private_names()
    assert not missing, (
        "the installed faust-streaming lacks private names the worker relies on (see "
        "streams/runtime/faust_private.py for why each is needed):\n  " + "\n  ".join(missing)
    )
    check_faust_private_names()  # does not raise


def test_the_worker_relies_on_at_most_six_private_names() -> None:
    assert len(ALL_NAMES) <= 6, [str(n) for n in ALL_NAMES]


def test_the_worker_keeps_no_faust_table(tmp_path: Path) -> None:
    """The run states are the worker's own (run_store.py): faust restores no changelog (it would read
    it uncommitted) and routes no write by its current event."""
    sa = build_app(WorkerSettings(data_dir=str(tmp_path), app_id="unit-faust-no-table"), partitions=3)
    assert not sa.app.tables.changelog_topics
    assert len(sa.app.tables) == 0


def test_a_real_consumer_has_the_attributes_faust_sets_in_its_init(tmp_path: Path) -> None:
    # the check finds these by their class annotation; a consumer built as the worker builds it has them
    sa = build_app(WorkerSettings(data_dir=str(tmp_path), app_id="unit-faust-private"), partitions=3)
    consumer = sa.app.consumer
    missing = [str(n) for n in ALL_NAMES if n.instance and not hasattr(consumer, n.qualname.split(".")[-1])]
    assert not missing, "faust's consumer no longer sets:\n  " + "\n  ".join(missing)


PUBLIC_FAUST_BASES = {"faust.Worker"}  # the process that runs the app: faust's public worker class


def test_the_runtime_subclasses_no_faust_driver_and_reaches_private_names_only_here() -> None:
    """Every underscored attribute of a faust object is reached through faust_private.py: the other
    runtime modules subclass only faust's public Worker, override no underscored method of it that
    ALL_NAMES does not declare, and touch no private name."""
    declared = {n.qualname.split(".")[-1] for n in ALL_NAMES}
    for module in RUNTIME.glob("*.py"):
        if module.name == "faust_private.py":
            continue
        text = module.read_text(encoding="utf-8")
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {ast.unparse(base) for base in node.bases}
            if not any("faust" in b.lower() for b in bases):
                continue
            assert bases <= PUBLIC_FAUST_BASES, f"{module.name}: {node.name}({', '.join(bases)})"
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name.startswith("_"):
                    assert item.name.startswith("__") or item.name in declared, f"{node.name}.{item.name}"
        assert "faust.streams._" not in text and "._commit(" not in text and "._read_offset" not in text, (
            module.name
        )


def test_the_input_is_read_without_read_offsets_for_it(tmp_path: Path) -> None:
    sa = build_app(WorkerSettings(data_dir=str(tmp_path), app_id="unit-faust-read-offsets"), partitions=3)
    consumer = sa.app.consumer
    faust_private.keep_no_read_offsets(consumer, sa.settings.input_topic)
    input_tp = TP(sa.settings.input_topic, 0)
    other = TP("other", 0)
    consumer._read_offset[input_tp] = 42  # faust's fetch loop writes one back after each record
    consumer._read_offset[other] = 7
    assert consumer._read_offset[input_tp] is None  # so it never drops an input record as read
    assert consumer._read_offset[other] == 7


def test_the_input_topic_is_declared_without_faust_acks(tmp_path: Path) -> None:
    sa = build_app(WorkerSettings(data_dir=str(tmp_path), app_id="unit-faust-acks"), partitions=3)
    assert sa.input_topic.acks is False
    assert not sa.app.topics.acks_enabled_for(sa.settings.input_topic)


def test_the_check_names_each_missing_name() -> None:
    names = [
        PrivateName("faust.transport.consumer", "Consumer.commit"),  # exists
        PrivateName("faust.transport.consumer", "Consumer._no_such_offset"),
        PrivateName("faust.transport.consumer", "Consumer._no_such_field", instance=True),
        PrivateName("faust.transport.consumer", "NoSuchConsumer._commit"),
        PrivateName("faust.streams", "_no_such_event"),
        PrivateName("faust.no_such_module", "anything"),
    ]
    assert missing_private_names(names) == [
        "faust.transport.consumer.Consumer._no_such_offset",
        "faust.transport.consumer.Consumer._no_such_field",
        "faust.transport.consumer.NoSuchConsumer._commit",
        "faust.streams._no_such_event",
        "faust.no_such_module.anything",
    ]


def test_a_faust_without_one_of_the_names_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(faust.transport.consumer.ThreadDelegateConsumer, "_commit")
    monkeypatch.delattr(faust.transport.consumer.Consumer, "_commit")  # its abstract declaration
    monkeypatch.delitem(faust.transport.consumer.Consumer.__annotations__, "_read_offset")
    assert missing_private_names() == [
        "faust.transport.consumer.ThreadDelegateConsumer._commit",
        "faust.transport.consumer.Consumer._read_offset",
    ]
    with pytest.raises(ConfigError, match=r"ThreadDelegateConsumer\._commit"):
        check_faust_private_names()
