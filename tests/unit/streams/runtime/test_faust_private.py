"""What the worker relies on of faust-streaming and mode (``streams/runtime/faust_private.py``): the
declared names exist, the declaration is complete (subclasses, overrides, private reads), and the
behaviours hold, by their source and by running faust's own code through them."""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import logging
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust
import faust.serializers.codecs
import faust.streams
import faust.transport.consumer
import pytest
from faust.types import TP

from olstream.shared.errors import ConfigError
from olstream.streams.framed_input import InputFraming
from olstream.streams.runtime import app as app_module
from olstream.streams.runtime import faust_private
from olstream.streams.runtime.app import StreamApp, StreamWorkerProcess, build_app
from olstream.streams.runtime.faust_private import (
    ALL_NAMES,
    AssignedOnlyIn,
    Code,
    PrivateName,
    check_faust_private_names,
    missing_private_names,
)
from olstream.streams.settings import WorkerSettings

RUNTIME = Path(faust_private.__file__).parent
STREAMS = RUNTIME.parent  # olstream/streams: every module of the worker


@pytest.fixture(autouse=True)
def _event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """faust's services bind to the current event loop when created."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


def built(tmp_path: Path, app_id: str) -> StreamApp:
    """The worker's faust app (3 input partitions, values read without a registry)."""
    settings = WorkerSettings(data_dir=str(tmp_path), app_id=app_id)
    return build_app(settings, partitions=3, framing=InputFraming(None))


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
    sa = built(tmp_path, "unit-faust-no-table")
    assert not sa.app.tables.changelog_topics
    assert len(sa.app.tables) == 0


def test_a_real_consumer_has_the_attributes_faust_sets_in_its_init(tmp_path: Path) -> None:
    # the check finds these by their class annotation; a consumer built as the worker builds it has them
    sa = built(tmp_path, "unit-faust-private")
    consumer = sa.app.consumer
    missing = [str(n) for n in ALL_NAMES if n.instance and not hasattr(consumer, n.qualname.split(".")[-1])]
    assert not missing, "faust's consumer no longer sets:\n  " + "\n  ".join(missing)


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(STREAMS.rglob("*.py")):
        parts = path.relative_to(STREAMS).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(("olstream.streams", *parts)), path


def _from_faust(klass: type) -> bool:
    return klass.__module__.split(".")[0] in ("faust", "mode")


def test_every_faust_class_the_worker_subclasses_is_declared_with_the_methods_it_overrides() -> None:
    """A class of the worker with a faust or mode class among its bases subclasses a declared class,
    and overrides exactly the methods its entry lists (constructors and other dunders aside: those
    are the class's public protocol)."""
    declared = {faust_private._lookup(n.module, n.qualname): n for n in ALL_NAMES if n.overrides}
    seen: set[str] = set()
    for module_name, _ in _modules():
        module = importlib.import_module(module_name)
        for klass in vars(module).values():
            if not isinstance(klass, type) or klass.__module__ != module_name or _from_faust(klass):
                continue
            bases = [k for k in klass.__mro__ if _from_faust(k)]
            if not bases:
                continue
            base = bases[0]
            assert base in declared, f"{module_name}.{klass.__qualname__} subclasses {base!r}, not declared"
            ours = [k for k in klass.__mro__ if not _from_faust(k) and k is not object]
            overridden = {
                name
                for k in ours
                for name, value in vars(k).items()
                if inspect.isfunction(value) and not name.startswith("__") and hasattr(base, name)
            }
            entry = declared[base]
            assert overridden == set(entry.overrides), f"{klass.__qualname__} overrides {sorted(overridden)}"
            seen.add(str(entry))
            # and reads no private attribute of faust's through self
            for node in ast.walk(ast.parse(inspect.getsource(klass))):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                    and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                ):
                    assert not hasattr(base, node.attr) or node.attr in entry.overrides, (
                        f"{klass.__qualname__} reads faust's self.{node.attr}"
                    )
    assert seen == {str(n) for n in declared.values()}, "a declared subclass the worker no longer has"


# an underscored attribute read on these is no faust name: Kafka's error codes, os._exit, and
# sys._current_frames (documented in the sys module, for the SIGUSR1 report)
NOT_FAUST = {"self", "cls", "os", "sys", "KafkaError"}


def test_the_worker_reaches_faust_private_names_only_through_faust_private() -> None:
    """No module of the worker but faust_private.py reads an underscored attribute of anything but its
    own objects, calls an underscored method through super() that no entry declares as overridden,
    or tells faust's exceptions or classes apart by their names."""
    overridden = {method for n in ALL_NAMES for method in n.overrides}
    for _, path in _modules():
        if path.name == "faust_private.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(STREAMS)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                owner = ast.unparse(node.value)
                if owner == "super()":
                    assert node.attr in overridden, f"{where}:{node.lineno}: super().{node.attr}"
                else:
                    assert owner in NOT_FAUST, f"{where}:{node.lineno}: {ast.unparse(node)}"
            if isinstance(node, ast.Compare):
                names = [n for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr == "__name__"]
                assert not names, f"{where}:{node.lineno}: {ast.unparse(node)} (compare the class itself)"


def test_the_input_is_read_without_read_offsets_for_it(tmp_path: Path) -> None:
    sa = built(tmp_path, "unit-faust-read-offsets")
    consumer = sa.app.consumer
    faust_private.keep_no_read_offsets(consumer, sa.settings.input_topic)
    input_tp = TP(sa.settings.input_topic, 0)
    other = TP("other", 0)
    consumer._read_offset[input_tp] = 42  # faust's fetch loop writes one back after each record
    consumer._read_offset[other] = 7
    assert consumer._read_offset[input_tp] is None  # so it never drops an input record as read
    assert consumer._read_offset[other] == 7


def test_the_input_topic_is_declared_without_faust_acks(tmp_path: Path) -> None:
    sa = built(tmp_path, "unit-faust-acks")
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


# ---------------------------------------------------------------------- the behaviours, through faust's code


class _AiokafkaConsumer:
    """What faust's consumer thread calls on aiokafka's consumer to seek."""

    def __init__(self) -> None:
        self.seeks: list[tuple[TP, int]] = []

    def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp, offset))

    async def position(self, tp: TP) -> int:
        return 0


def test_faust_reads_and_writes_its_read_offsets_through_the_mapping_the_worker_put_in(
    tmp_path: Path, _event_loop: asyncio.AbstractEventLoop
) -> None:
    """faust's own code that touches the read offsets, each path run for real: a seek to the committed
    offsets (perform_seek's update), a seek (Consumer.seek), a seek on the consumer thread
    (_seek_wait, as the worker's seek_wait), the fetch loop (_drain_messages: drops below a read offset,
    writes one back after each record) and a revoke (pop). None keeps a read offset for the input,
    the fetch loop drops none of its records, and faust keeps the mapping it was given."""

    async def run() -> None:  # faust's services made in the running loop are bound to it
        sa = built(tmp_path, "unit-faust-read-paths")
        consumer: Any = sa.app.consumer
        topic = sa.settings.input_topic
        faust_private.keep_no_read_offsets(consumer, topic)
        offsets = consumer._read_offset
        input_tp, other, third = TP(topic, 0), TP("other", 0), TP("other", 1)

        async def committed() -> dict[TP, int]:
            return {input_tp: 10, other: 10, third: 5}

        async def seek_nothing(tp: TP, offset: int) -> None:
            return None

        consumer.seek_to_committed = committed
        consumer._seek = seek_nothing
        await consumer.perform_seek()
        await consumer.seek(input_tp, 20)
        aiokafka_consumer = _AiokafkaConsumer()
        await consumer._thread._seek_wait(aiokafka_consumer, {input_tp: 30, third: 0})
        assert aiokafka_consumer.seeks == [(input_tp, 30), (third, 0)]
        assert offsets[input_tp] is None
        assert dict(offsets) == {other: 10}  # third's went with the seek to 0

        fetcher = SimpleNamespace(_stopped=asyncio.Event())
        fetched = [(input_tp, 3), (other, 3), (other, 11), (input_tp, 4), (input_tp, 2)]
        delivered: list[tuple[str, int]] = []

        async def getmany(timeout: float) -> AsyncIterator[tuple[TP, Any]]:
            for tp, offset in fetched:
                yield (
                    tp,
                    SimpleNamespace(
                        topic=tp.topic, partition=tp.partition, offset=offset, key=None, value=None
                    ),
                )
            fetcher._stopped.set()  # one batch

        async def callback(message: Any) -> None:
            delivered.append((message.topic, message.offset))

        consumer.getmany = getmany
        consumer.callback = callback
        await asyncio.wait_for(consumer._drain_messages(fetcher), 10)
        # other's record below its read offset is dropped; the input's, even one below another, are not
        assert delivered == [(topic, 3), ("other", 11), (topic, 4), (topic, 2)]
        assert dict(offsets) == {other: 11}

        async def revoked(partitions: set[TP]) -> None:
            return None

        consumer._on_partitions_revoked = revoked
        await consumer.on_partitions_revoked({input_tp, other})
        assert dict(offsets) == {}
        assert consumer._read_offset is offsets  # faust kept the worker's mapping all along

    _event_loop.run_until_complete(run())


def test_mode_installs_its_signal_handlers_where_the_worker_chains_and_replaces_them(
    tmp_path: Path, _event_loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mode's install_signal_handlers, run for real (its loop's add_signal_handler recorded, the stop
    deadline not installed into pytest's process): SIGTERM and SIGINT go to mode's handlers, onto
    which the deadline is chained right after, and SIGUSR1's last handler, the one the loop keeps, is
    the worker's report."""
    added: list[tuple[int, Callable[..., Any]]] = []
    monkeypatch.setattr(
        _event_loop, "add_signal_handler", lambda sig, handler, *a: added.append((sig, handler))
    )
    chained: list[int] = []
    monkeypatch.setattr(app_module, "installed_deadline", lambda sig: None)
    monkeypatch.setattr(app_module, "install_stop_deadline", lambda *a, **k: chained.append(len(added)))
    sa = built(tmp_path, "unit-faust-signals")
    worker = StreamWorkerProcess(sa.app, loglevel=logging.INFO, override_logging=False, quiet=True)
    worker.loop = _event_loop  # mode may hand a service a loop cached by an earlier test: this test's
    worker.install_signal_handlers()
    handlers: dict[int, Callable[..., Any]] = {}
    for sig, handler in added:
        handlers[sig] = handler
    assert {signal.SIGTERM, signal.SIGINT} <= set(handlers)
    assert getattr(handlers[signal.SIGTERM], "__self__", None) is worker  # mode's own stop
    assert chained and chained[0] >= [s for s, _ in added].index(signal.SIGTERM) + 1
    assert handlers[signal.SIGUSR1] == worker.on_sigusr1
    assert [s for s, _ in added].count(signal.SIGUSR1) == 2  # mode's, then the worker's over it


# ---------------------------------------------------------------------- the check reports a changed behaviour


def test_a_changed_fetch_loop_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    async def _drain_messages(self: Any, fetcher: Any) -> None:  # reads the read offsets by .get
        get_read_offset = self._read_offset.get
        set_read_offset = self._read_offset.__setitem__
        async for tp, message in self.getmany(timeout=1.0):
            offset = message.offset
            r_offset = get_read_offset(tp)
            if r_offset is None or offset >= r_offset:
                set_read_offset(tp, offset)

    monkeypatch.setattr(faust.transport.consumer.Consumer, "_drain_messages", _drain_messages)
    assert missing_private_names() == [
        "faust.transport.consumer.Consumer._drain_messages no longer has "
        "`get_read_offset = self._read_offset.__getitem__`"
    ]
    with pytest.raises(ConfigError, match=r"_drain_messages no longer has"):
        check_faust_private_names()


def test_a_mapping_replaced_after_init_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "unit_faust_consumer_like.py").write_text(
        "class Consumer:\n"
        "    def __init__(self):\n"
        "        self._read_offset = {}\n"
        "        self._read_offset['tp'] = 1\n"
        "    async def on_partitions_assigned(self, assigned):\n"
        "        self._read_offset = {}\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    check = AssignedOnlyIn(("unit_faust_consumer_like",), "_read_offset", frozenset({"Consumer.__init__"}))
    assert check.problems() == [
        "unit_faust_consumer_like.Consumer.on_partitions_assigned assigns ._read_offset"
    ]


def test_a_method_no_longer_there_to_override_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(faust.serializers.codecs.Codec, "_dumps")
    assert missing_private_names() == [
        "faust.serializers.codecs.Codec._dumps (a method the runtime overrides)",
    ]


def test_changed_code_is_reported_line_by_line() -> None:
    code = Code(
        "faust.transport.consumer",
        "Consumer.seek",
        ("await self._seek(partition, offset)", "self._read_offset[ensure_TP(partition)] = offset"),
    )
    assert code.problems() == [  # faust writes `offset if offset else None`
        "faust.transport.consumer.Consumer.seek no longer has "
        "`self._read_offset[ensure_TP(partition)] = offset`"
    ]
    assert Code("faust.transport.consumer", "Consumer.no_such_method", ("pass",)).problems() == [
        "faust.transport.consumer.Consumer.no_such_method (its source, to check)"
    ]
