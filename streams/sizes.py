"""How large a run's events and state can grow: the bound the worker checks per declaration.

A run's terminal event carries every dataset it declared, and its state (stored in the table
and its changelog) grows with each declaration; both must stay within `--max-event-bytes`. The
exact sizes are known only when the events are built, so each declaration is checked against a
bound: a cheap one first (characters of the run's variable fields, at 4 bytes each), and only a
run that could be near the limit pays for serializing its state.
"""

from __future__ import annotations

from olstream.streams.state import RunState
from olstream.streams.state_store import dumps_state

PER_DATASET_BYTES = 512
"""An event's bytes for one dataset besides its names (facets, quoting): about 350 measured."""
FIXED_BYTES = 8192
"""An event's bytes besides its datasets and error text: about 1,200 measured."""


def _variable_chars(s: RunState) -> int:
    n = 0
    for refs in (s.inputs, s.outputs):
        for d in refs:
            n += len(d.namespace) + len(d.name) + len(d.version or "")
    end = s.end
    if end is not None:
        n += len(end.error_message or "") + len(end.error_type or "") + len(end.stack_trace or "")
    ids = (s.engine_run_id, s.task_id, s.namespace, s.workflow_type, s.workflow_instance, s.principal or "")
    return n + sum(map(len, ids)) + 2 * len(s.run.name) + (len(s.job_path or ""))


def terminal_event_bound(s: RunState, limit: int) -> int | None:
    """None when the run's events and state surely fit in `limit` bytes, else the size bound found."""
    datasets = len(s.inputs) + len(s.outputs)
    overhead = FIXED_BYTES + PER_DATASET_BYTES * datasets
    if 4 * _variable_chars(s) + overhead <= limit:
        return None
    bound = len(dumps_state(s)) + overhead
    return bound if bound > limit else None
