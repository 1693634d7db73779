"""The faust-streaming private names the worker relies on (``streams/runtime/faust_private.py``) exist."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from pathlib import Path

import faust.streams
import faust.transport.consumer
import pytest

from olstream.shared.errors import ConfigError
from olstream.streams.runtime import faust_private
from olstream.streams.runtime.app import build_app
from olstream.streams.runtime.consumer import WorkerConsumer, WorkerTransport
from olstream.streams.runtime.faust_private import (
    OVERRIDDEN,
    USED,
    PrivateName,
    check_faust_private_names,
    missing_private_names,
)
from olstream.streams.settings import WorkerSettings


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


def test_a_real_consumer_has_the_attributes_faust_sets_in_its_init(tmp_path: Path) -> None:
    # the check finds these by their class annotation; a consumer built as the worker builds it has them
    sa = build_app(WorkerSettings(data_dir=str(tmp_path), app_id="unit-faust-private"), partitions=3)
    consumer = sa.app.consumer
    missing = [str(n) for n in USED if n.instance and not hasattr(consumer, n.qualname.split(".")[-1])]
    assert not missing, "faust's consumer no longer sets:\n  " + "\n  ".join(missing)


def _overridden_here(cls: type, faust_base: type) -> set[str]:
    # methods and classes the olstream class defines over its faust base (not __init__, nor what mode's
    # and abc's class machinery adds to every subclass: a logger, the abc cache)
    return {
        name
        for name, value in vars(cls).items()
        if callable(value) and not name.startswith("__") and hasattr(faust_base, name)
    }


def test_every_override_of_a_faust_name_is_declared() -> None:
    declared = {(n.overridden_by, n.qualname.split(".")[-1]) for n in OVERRIDDEN}
    found = {
        (f"{cls.__module__}.{cls.__qualname__}", name)
        for cls, base in (
            (WorkerConsumer, faust_private.AiokafkaConsumer),
            (WorkerTransport, faust_private.AiokafkaTransport),
        )
        for name in _overridden_here(cls, base)
    }
    assert found == declared


def test_every_declared_override_is_the_method_faust_s_base_defines() -> None:
    for name in OVERRIDDEN:
        if name.qualname == "Transport.Consumer":
            continue
        cls_name, attribute = name.qualname.split(".")
        faust_cls = getattr(faust.transport.consumer, cls_name)
        assert issubclass(WorkerConsumer, faust_cls), name
        assert inspect.isfunction(getattr(faust_cls, attribute)), name


def test_the_check_names_each_missing_name() -> None:
    names = [
        PrivateName("faust.transport.consumer", "Consumer._new_offset"),  # exists
        PrivateName("faust.transport.consumer", "Consumer._no_such_offset"),
        PrivateName("faust.transport.consumer", "Consumer._no_such_field", instance=True),
        PrivateName("faust.transport.consumer", "NoSuchConsumer._new_offset"),
        PrivateName("faust.streams", "_no_such_event"),
        PrivateName("faust.no_such_module", "anything"),
    ]
    assert missing_private_names(names) == [
        "faust.transport.consumer.Consumer._no_such_offset",
        "faust.transport.consumer.Consumer._no_such_field",
        "faust.transport.consumer.NoSuchConsumer._new_offset",
        "faust.streams._no_such_event",
        "faust.no_such_module.anything",
    ]


def test_a_faust_without_one_of_the_names_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(faust.transport.consumer.Consumer, "_new_offset")
    monkeypatch.delitem(faust.transport.consumer.Consumer.__annotations__, "_unacked_messages")
    monkeypatch.delattr(faust.streams, "_current_event")
    assert missing_private_names() == [
        "faust.streams._current_event",
        "faust.transport.consumer.Consumer._unacked_messages",
        "faust.transport.consumer.Consumer._new_offset",
    ]
    with pytest.raises(ConfigError, match=r"faust\.transport\.consumer\.Consumer\._new_offset"):
        check_faust_private_names()
