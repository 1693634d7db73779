"""Everything of faust-streaming and mode the worker's runtime relies on beyond their public API.

The worker commits its input itself: faust reads the input topic for it (declared with faust's
public ``acks=False``, so faust tracks no acks, gaps or commits for it), and the worker's checkpoint
(``olstream.streams.runtime.checkpoint``) commits the processed prefix of each input partition.
What no public API of faust 0.15 serves is declared here, each entry of :data:`ALL_NAMES` saying why:
the private names the runtime reaches (through this module only), the faust classes it subclasses
with the methods it overrides (``StreamWorkerProcess`` in ``app.py``, ``SingleObjectValues`` in
``input_codec.py``), and the behaviours of faust's code that these depend on.

:func:`missing_private_names` checks every entry against the installed faust-streaming and mode: each
name exists, each overridden method exists as a method of the class, and each behaviour's code is
still there (:class:`Code`, :class:`AssignedOnlyIn`: faust's source compared after ``ast``
normalisation, so layout and comments do not matter but any change to those lines does).
``tests/unit/streams/runtime/test_faust_private.py`` fails naming each one an upgrade changed, and
also drives faust's real code paths through the behaviours; :func:`check_faust_private_names` is the
same check for a worker's start. Importing this module needs no private name: each is looked up when
used, so the check can report it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import textwrap
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, NamedTuple, Protocol

from faust.types import TP
from faust.types.transports import ConsumerT

from olstream.shared.errors import ConfigError


class Behaviour(Protocol):
    """faust code an entry depends on: what of it changed, if anything (empty when it is as relied on)."""

    def problems(self) -> list[str]: ...


class PrivateName(NamedTuple):
    """A name of faust or mode the runtime relies on: `qualname` (``Class.attr``, ``attr`` or a class)
    of `module`."""

    module: str
    qualname: str
    instance: bool = False  # an attribute faust's __init__ sets (declared by an annotation on the class)
    overrides: tuple[str, ...] = ()  # a class the runtime subclasses: the methods its subclass overrides
    relies_on: tuple[Behaviour, ...] = ()  # faust's code whose behaviour the runtime depends on

    def __str__(self) -> str:
        return f"{self.module}.{self.qualname}"


class Code(NamedTuple):
    """Behaviour by source: each of `lines` (a statement or expression) is in `module`'s `function`."""

    module: str
    function: str
    lines: tuple[str, ...]

    def problems(self) -> list[str]:
        found = _source_nodes(self.module, self.function)
        if found is None:
            return [f"{self.module}.{self.function} (its source, to check)"]
        return [
            f"{self.module}.{self.function} no longer has `{line}`"
            for line in self.lines
            if _normalised(line) not in found
        ]


class AssignedOnlyIn(NamedTuple):
    """Behaviour by source: `modules` assign ``<object>.<attribute>`` only in the functions `where`."""

    modules: tuple[str, ...]
    attribute: str
    where: frozenset[str]

    def problems(self) -> list[str]:
        out = []
        for module in self.modules:
            tree = _module_tree(module)
            if tree is None:
                out.append(f"{module} (its source, to check)")
                continue
            for function in sorted(_assigning_functions(tree, self.attribute) - self.where):
                out.append(f"{module}.{function} assigns .{self.attribute}")
        return out


_CONSUMER = "faust.transport.consumer"  # faust's base consumer and its thread-delegating subclass
_AIOKAFKA = "faust.transport.drivers.aiokafka"  # the aiokafka driver: its consumer and consumer thread

ALL_NAMES: tuple[PrivateName, ...] = (
    # commit given offsets of the group's consumer (on faust's consumer thread, where aiokafka's
    # consumer lives): faust's public Consumer.commit commits only its own ack bookkeeping, which
    # acks=False leaves empty for the input (commit_offsets). Only under at_least_once: under
    # exactly_once the input offsets are committed in each partition's transaction. Relies on it
    # committing each offset as given (the next one to read) and answering False, not raising, when
    # a rebalance took the partitions
    PrivateName(
        _CONSUMER,
        "ThreadDelegateConsumer._commit",
        relies_on=(
            Code(_CONSUMER, "ThreadDelegateConsumer._commit", ("await self._thread.commit(offsets)",)),
            Code(
                _AIOKAFKA,
                "AIOKafkaConsumerThread._commit",
                (
                    "{ensure_aiokafka_TP(tp): OffsetAndMetadata(offset, '') "
                    "for tp, offset in commitable_offsets.items()}",
                    "await consumer.commit(aiokafka_offsets)",
                    "'already rebalanced' in str(exc)",
                ),
            ),
        ),
    ),
    # faust's read offsets: its fetch loop drops a fetched record below its partition's read offset,
    # and writes a read offset back after delivering a record even when the partition was revoked and
    # sought meanwhile, which dropped a new owner's records. For the input topic the worker's own
    # ledger decides what is taken, so the mapping keeps none for it (keep_no_read_offsets, before
    # the fetch loop starts). That holds only while faust
    # - assigns the attribute in Consumer.__init__ only, so the mapping put in stays the one it uses
    #   for the consumer's life (a fresh one on a rebalance would bring the drops back);
    # - has its fetch loop (Consumer._drain_messages) bind the mapping's own __getitem__ and
    #   __setitem__ when it starts, look each record's partition up through them, and drop a record
    #   only below a read offset that is not None.
    # Its other writes (perform_seek's update, seek, the consumer thread's _seek_wait, the revoke's
    # pop) reach the mapping through its methods whatever their form, as it is a MutableMapping: on a
    # dict subclass, perform_seek's dict.update would bypass __setitem__ and store the input's offsets
    PrivateName(
        _CONSUMER,
        "Consumer._read_offset",
        instance=True,
        relies_on=(
            AssignedOnlyIn((_CONSUMER, _AIOKAFKA), "_read_offset", frozenset({"Consumer.__init__"})),
            Code(
                _CONSUMER,
                "Consumer._drain_messages",
                (
                    "get_read_offset = self._read_offset.__getitem__",
                    "set_read_offset = self._read_offset.__setitem__",
                    "r_offset = get_read_offset(tp)",
                    "r_offset is None or offset >= r_offset",
                    "set_read_offset(tp, offset)",
                ),
            ),
        ),
    ),
    # seek on faust's consumer thread (where aiokafka's consumer lives) and wait until aiokafka's
    # position is there: faust's public Consumer.seek calls aiokafka's seek from the event loop's
    # thread, racing the consumer thread's fetcher (seek_wait). Not underscored, but no part of
    # faust's ConsumerT interface: only its thread-delegating consumer has it
    PrivateName(
        _CONSUMER,
        "ThreadDelegateConsumer.seek_wait",
        relies_on=(
            Code(
                _CONSUMER, "ThreadDelegateConsumer.seek_wait", ("await self._thread.seek_wait(partitions)",)
            ),
            Code(
                _AIOKAFKA,
                "AIOKafkaConsumerThread.seek_wait",
                ("self.call_thread(self._seek_wait, consumer, partitions)",),
            ),
            Code(
                _AIOKAFKA,
                "AIOKafkaConsumerThread._seek_wait",
                (
                    "consumer.seek(tp, offset)",
                    "asyncio.gather(*[consumer.position(tp) for tp in partitions])",
                ),
            ),
        ),
    ),
    # the generation and member id of faust's member (group_member): aiokafka's coordinator, reached
    # through faust's consumer thread, which creates the aiokafka consumer and keeps it for its life.
    # exactly_once sends them with its offsets (KIP-447); relies on aiokafka resetting both when the
    # coordinator no longer knows the member, so a dropped member is seen as none
    PrivateName(
        _AIOKAFKA,
        "AIOKafkaConsumerThread._ensure_consumer",
        relies_on=(
            Code(
                _CONSUMER, "ThreadDelegateConsumer.__init__", ("self._thread = self._new_consumer_thread()",)
            ),
            Code(_AIOKAFKA, "AIOKafkaConsumerThread._ensure_consumer", ("return self._consumer",)),
            Code(
                "aiokafka.consumer.group_coordinator",
                "GroupCoordinator.reset_generation",
                (
                    "self.generation = OffsetCommitRequest.DEFAULT_GENERATION_ID",
                    "self.member_id = JoinGroupRequest.UNKNOWN_MEMBER_ID",
                ),
            ),
        ),
    ),
    # the process that runs the app (StreamWorkerProcess in app.py) subclasses faust's public Worker:
    # mode has no hook to add to its signal handling. It chains the stop deadline onto mode's
    # SIGTERM/SIGINT handlers and puts its own SIGUSR1 report in place of mode's, both right after
    # mode's install_signal_handlers installed them with loop.add_signal_handler (which mode calls at
    # the worker's first start); it checks the deadline again in on_startup_finished, which faust
    # calls once the app has started
    PrivateName(
        "faust",
        "Worker",
        overrides=("install_signal_handlers", "on_startup_finished"),
        relies_on=(
            Code("mode.worker", "Worker.default_on_first_start", ("self.install_signal_handlers()",)),
            Code(
                "mode.worker",
                "Worker._install_signal_handlers_unix",
                (
                    "self.loop.add_signal_handler(signal.SIGINT, self._on_sigint)",
                    "self.loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)",
                    "self.loop.add_signal_handler(signal.SIGUSR1, self._on_sigusr1)",
                ),
            ),
            Code(
                "faust.worker",
                "Worker.on_init_dependencies",
                ("self.app.on_startup_finished = self.on_startup_finished",),
            ),
        ),
    ),
    # the records topic's value codec (SingleObjectValues in input_codec.py): faust's documented way
    # to define a codec is to subclass Codec and implement _loads and _dumps (faust/serializers/
    # codecs.py); its public loads and dumps call them
    PrivateName(
        "faust.serializers.codecs",
        "Codec",
        overrides=("_loads", "_dumps"),
        relies_on=(
            Code("faust.serializers.codecs", "Codec.loads", ("cast(Codec, node)._loads(s)",)),
            Code("faust.serializers.codecs", "Codec.dumps", ("cast(Codec, node)._dumps(obj)",)),
        ),
    ),
)

# ---------------------------------------------------------------------- the names, as the runtime uses them


async def commit_offsets(consumer: ConsumerT, offsets: Mapping[TP, int]) -> bool:
    """Commit `offsets` (the next offset to read of each partition) for the consumer's group; False
    when faust's consumer did not (a rebalance took the partitions: their next owner reads again)."""
    return bool(await consumer._commit(offsets))  # type: ignore[attr-defined]


def group_member(consumer: ConsumerT) -> tuple[int, str]:
    """The generation and member id of faust's member of the group now ((-1, "") when it is none)."""
    coordinator = consumer._thread._ensure_consumer()._coordinator  # type: ignore[attr-defined]
    return int(coordinator.generation), str(coordinator.member_id)


class ReadOffsetsWithoutInput(MutableMapping[TP, int | None]):
    """faust's read offsets, never any for one topic (faust's fetch loop then drops none of its records).

    In place of faust's ``defaultdict(lambda: None)``: a partition without one reads None (and is not
    added). Every way of reading or writing it (``[]``, ``update``, ``pop``, ``get``, ``in keys()``)
    goes through the methods below."""

    def __init__(self, topic: str) -> None:
        self._topic = topic
        self._offsets: dict[TP, int | None] = {}

    def __getitem__(self, key: TP) -> int | None:
        if key.topic == self._topic:
            return None
        return self._offsets.get(key)

    def __setitem__(self, key: TP, value: int | None) -> None:
        if key.topic != self._topic:
            self._offsets[key] = value

    def __delitem__(self, key: TP) -> None:
        self._offsets.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._offsets

    def __iter__(self) -> Iterator[TP]:
        return iter(self._offsets)

    def __len__(self) -> int:
        return len(self._offsets)


async def seek_wait(consumer: ConsumerT, offsets: Mapping[TP, int]) -> None:
    """Seek partitions on faust's consumer thread and wait until the seeks are done (raises aiokafka's
    IllegalStateError for a partition no longer assigned)."""
    await consumer.seek_wait(offsets)


def keep_no_read_offsets(consumer: ConsumerT, topic: str) -> None:
    """Give the consumer read offsets that keep none for `topic` (before its fetch loop starts)."""
    consumer._read_offset = ReadOffsetsWithoutInput(topic)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- the check

_ABSENT = object()


def _lookup(module: str, qualname: str) -> Any:
    """`qualname` (dotted; empty for the module itself) of `module`, or _ABSENT."""
    try:
        owner: Any = importlib.import_module(module)
    except ImportError:
        return _ABSENT
    for part in qualname.split(".") if qualname else ():
        owner = getattr(owner, part, _ABSENT)
        if owner is _ABSENT:
            break
    return owner


def _exists(name: PrivateName) -> bool:
    *path, attribute = name.qualname.split(".")
    owner = _lookup(name.module, ".".join(path))
    if owner is _ABSENT:
        return False
    if hasattr(owner, attribute):
        return True
    # an attribute faust's __init__ sets: faust declares each on its class, by an annotation
    return (
        name.instance
        and isinstance(owner, type)
        and any(attribute in vars(klass).get("__annotations__", {}) for klass in owner.__mro__)
    )


def _normalised(code: str) -> str:
    return ast.unparse(ast.parse(code))


def _source_nodes(module: str, function: str) -> set[str] | None:
    """Every statement and expression of `function` of `module`, as ``ast.unparse`` writes it."""
    target = _lookup(module, function)
    if target is _ABSENT:
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(target)))
    except (OSError, TypeError, SyntaxError):
        return None
    return {ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.stmt | ast.expr)}


def _module_tree(module: str) -> ast.Module | None:
    try:
        return ast.parse(inspect.getsource(importlib.import_module(module)))
    except (ImportError, OSError, TypeError, SyntaxError):
        return None


def _assigning_functions(tree: ast.Module, attribute: str) -> set[str]:
    """The qualnames of the functions that assign ``<object>.<attribute>`` (``<module>`` outside any)."""
    found: set[str] = set()

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, (*scope, child.name))
                continue
            targets: list[ast.expr] = []
            if isinstance(child, ast.Assign):
                targets = list(child.targets)
            elif isinstance(child, ast.AnnAssign | ast.AugAssign) and child.value is not None:
                targets = [child.target]
            if any(_binds(target, attribute) for target in targets):
                found.add(".".join(scope) or "<module>")
            visit(child, scope)

    visit(tree, ())
    return found


def _binds(target: ast.expr, attribute: str) -> bool:
    """Whether assigning to `target` rebinds ``<object>.<attribute>`` (not an item of it)."""
    if isinstance(target, ast.Attribute):
        return target.attr == attribute
    if isinstance(target, ast.Tuple | ast.List):
        return any(_binds(element, attribute) for element in target.elts)
    if isinstance(target, ast.Starred):
        return _binds(target.value, attribute)
    return False


def _problems(name: PrivateName) -> list[str]:
    if not _exists(name):
        return [str(name)]
    problems = []
    owner = _lookup(name.module, name.qualname)
    for method in name.overrides:
        if not inspect.isfunction(getattr(owner, method, None)):
            problems.append(f"{name}.{method} (a method the runtime overrides)")
    for behaviour in name.relies_on:
        problems.extend(behaviour.problems())
    return problems


def missing_private_names(names: Iterable[PrivateName] = ALL_NAMES) -> list[str]:
    """What the installed faust lacks or changed of the declared entries: names (module attributes,
    class attributes and methods), methods the runtime overrides, and the code of behaviours."""
    return [problem for name in names for problem in _problems(name)]


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def check_faust_private_names() -> None:
    """Refuse to start a worker on a faust-streaming that lacks or changed what the worker relies on."""
    missing = missing_private_names()
    if missing:
        raise ConfigError(
            f"the installed faust-streaming {_version('faust-streaming')} (mode-streaming "
            f"{_version('mode-streaming')}, aiokafka {_version('aiokafka')}) lacks or changed private "
            "names the worker relies on: "
            + ", ".join(missing)
            + "; install the faust-streaming line pyproject.toml pins (see "
            "olstream/streams/runtime/faust_private.py)"
        )
