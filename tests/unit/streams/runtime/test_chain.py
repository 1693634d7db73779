"""The record path as a chain (``streams/runtime/chain.py``): docs/worker.md draws the steps the code
builds, in the same order, and one record's way from faust's delivery to its committed offset
passes those steps, in order, and few functions of the runtime."""

from __future__ import annotations

import asyncio
import importlib
import re
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from olstream.streams.input_record import InputRecord
from olstream.streams.runtime import chain
from tests.support.stream_records import ended, started
from tests.unit.streams.runtime.test_agent import Rig, commits, event_of

REPO = Path(__file__).resolve().parents[4]
RUNTIME = REPO / "streams" / "runtime"
MAX_RUNTIME_FUNCTIONS = 20  # issue 41: a record's path passes at most 20 functions of streams/runtime/


def drawn_steps() -> list[tuple[str, str]]:
    """The steps docs/worker.md draws between its chain markers: (class, file under streams/runtime)."""
    text = (REPO / "docs" / "worker.md").read_text()
    begin, end = text.index("<!-- chain: begin"), text.index("<!-- chain: end -->")
    drawing = text[begin:end]
    assert len(drawing.splitlines()) <= 40, "the chain's drawing takes at most 40 lines"
    found = re.findall(r"^\s*(\d+) (\w+)\s+streams/runtime/(\w+\.py)", drawing, re.MULTILINE)
    assert [int(n) for n, _, _ in found] == list(range(1, len(found) + 1)), "steps numbered in order"
    return [(name, module) for _, name, module in found]


def test_the_drawing_in_worker_md_names_the_steps_of_the_code_in_order() -> None:
    assert drawn_steps() == list(chain.STEPS)
    assert 6 <= len(chain.STEPS) <= 8
    for name, module in chain.STEPS:
        assert (RUNTIME / module).is_file(), module
        cls = getattr(importlib.import_module(f"olstream.streams.runtime.{module[:-3]}"), name)
        assert asyncio.iscoroutinefunction(cls.submit), f"{name}.submit is the chain's contract"


def walk(rig: Rig) -> list[str]:
    """The worker's chain from its head, each step's `next` in turn."""
    names, step = [], rig.worker.head
    while step is not None:
        names.append(type(step).__name__)
        step = getattr(step, "next", None)
    return names


def test_the_worker_builds_the_chain_the_drawing_shows(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop)
    assert walk(rig) == [name for name, _ in chain.STEPS]


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_a_record_passes_the_steps_in_order_and_at_most_20_runtime_functions(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop, guarantee: str
) -> None:
    """A record traced from the agent's hand-over (`StreamWorker.head`) to its committed offset (a
    batch of one, so its checkpoint commits it). Counted: the functions of streams/runtime/; not
    counted: the pure core (streams/*.py, contract), faust, the standard library and the rig's fakes
    (which stand in for the Kafka clients and the store)."""
    rig = Rig(monkeypatch, loop, batch_size=1, processing_guarantee=guarantee)
    # first uses: the table's rescan, the marks read, the metrics' label children
    rig.feed(event_of(started("warm", offset=0), 0, 0), event_of(ended("warm", offset=1), 0, 1))
    rig.feed(event_of(started("run", offset=2), 0, 2))
    rig.take()
    calls: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        name = frame.f_code.co_filename
        if event == "call" and "/streams/runtime/" in name and "/tests/" not in name:
            calls.append((Path(name).name, frame.f_code.co_qualname))

    event = event_of(ended("run", offset=3), 0, 3)
    sys.setprofile(profile)
    try:
        loop.run_until_complete(rig.worker.head.submit(InputRecord.of(event)))
    finally:
        sys.setprofile(None)
    trace = rig.take()
    if guarantee == "exactly_once":
        assert ("txn-commit", ((0, 4), (1, 0))) in trace  # every owned partition's offset
    else:
        assert commits(trace, 0) == [4]
    functions = list(dict.fromkeys(calls))
    submits = [qualname.split(".")[0] for _, qualname in functions if qualname.endswith(".submit")]
    assert submits == [name for name, _ in chain.STEPS]
    assert len(functions) <= MAX_RUNTIME_FUNCTIONS, "\n".join(f"{m}: {q}" for m, q in functions)


def drawn_names(heading: str) -> list[str]:
    """The names drawn under `heading` (a line starting with it) up to the next unindented line."""
    text = (REPO / "docs" / "worker.md").read_text()
    drawing = text[text.index("<!-- chain: begin") : text.index("<!-- chain: end -->")]
    lines = drawing.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    names = []
    for line in lines[start + 1 :]:
        if not line.startswith("   "):
            break
        if not line.startswith("    "):  # a name's own line, not its text's continuation
            names.append(line.split()[0])
    return names


def nested_functions(function: Any) -> list[str]:
    """The names of the functions defined inside `function` (the timers and hooks it registers)."""
    return [const.co_name for const in function.__code__.co_consts if hasattr(const, "co_name")]


def test_the_drawing_shows_every_timer_and_rebalance_hook_the_worker_registers() -> None:
    from olstream.streams.runtime import agent

    assert drawn_names("timers (agent.register_timers") == nested_functions(agent.register_timers)
    assert drawn_names("rebalance hooks (agent.register_hooks)") == nested_functions(agent.register_hooks)


def drawn_rebalance() -> list[str]:
    """The functions docs/worker.md lists for a traced rebalance, in order."""
    text = (REPO / "docs" / "worker.md").read_text()
    block = text[text.index("<!-- rebalance: begin") : text.index("<!-- rebalance: end -->")]
    body = block[block.index("```") + 3 : block.rindex("```")]
    names = []
    for part in re.sub(r"^(revoke|assign)\s+", "→ ", body, flags=re.MULTILINE).split("→"):
        name = re.sub(r"\(.*?\)", "", part).strip()
        if name:
            names.append(name)
    return names


def test_a_traced_rebalance_passes_the_functions_the_drawing_lists(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    """A revocation and the next assignment, traced as a record is (exactly_once, a batch of one record
    in flight): the hooks call the chain's life cycle only, and docs/worker.md lists the runtime
    functions they pass. Executor calls run inline, so the restore of the run states is traced too;
    the fakes of the Kafka clients and the store are not counted."""
    rig = Rig(monkeypatch, loop, processing_guarantee="exactly_once")
    rig.feed(event_of(started("run", offset=0), 0, 0))

    async def inline(_executor: Any, fn: Any, *args: Any) -> Any:
        return fn(*args)

    monkeypatch.setattr(loop, "run_in_executor", inline)
    calls: list[str] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        name = frame.f_code.co_filename
        qualname = frame.f_code.co_qualname
        runtime = "/streams/runtime/" in name and "/tests/" not in name
        if event == "call" and runtime and not re.search(r"<(genexpr|listcomp|dictcomp|setcomp)>", qualname):
            calls.append(qualname.replace("<locals>.", ""))

    sys.setprofile(profile)
    try:
        rig.rebalance(assigned=(0, 1))
    finally:
        sys.setprofile(None)
    assert ("txn-commit", ((0, 1), (1, 0))) in rig.take()  # the batch was checkpointed on the way
    assert list(dict.fromkeys(calls)) == drawn_rebalance()


def test_the_agent_uses_few_runtime_modules_and_sets_nothing_of_another_object() -> None:
    """agent.py is the faust glue: it imports at most 8 modules of streams/runtime/, and assigns no
    attribute but its own (``self.x = ...`` in StreamWorker); the chain is built in worker_parts.py."""
    import ast

    tree = ast.parse((RUNTIME / "agent.py").read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "olstream.streams.runtime":
                modules.update(alias.name for alias in node.names)
            elif node.module.startswith("olstream.streams.runtime."):
                modules.add(node.module.rsplit(".", 1)[1])
    assert len(modules) <= 8, sorted(modules)
    foreign = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute):
                owner = target.value
                if not (isinstance(owner, ast.Name) and owner.id == "self"):
                    foreign.append(ast.unparse(target))
    assert foreign == []
