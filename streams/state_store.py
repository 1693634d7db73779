"""A run state's stored form: compact JSON in the worker's table (RocksDB and its changelog).

Every field needed to re-emit a run's events byte for byte is stored (`olstream.streams.state`).
"""

from __future__ import annotations

import json
from typing import Any

from olstream.streams.state import DatasetRef, JobRun, RunEnd, RunState


def _jobrun_out(j: JobRun | None) -> list[str] | None:
    return None if j is None else [j.namespace, j.name, j.run_id]


def _jobrun_in(v: list[str] | None) -> JobRun | None:
    return None if v is None else JobRun(v[0], v[1], v[2])


def state_document(s: RunState) -> dict[str, Any]:
    """The stored form as a JSON document: `dumps_state` writes exactly ``json.dumps(document,
    separators=(",", ":"), ensure_ascii=False)`` of it."""
    end = s.end
    return {
        "end_ms": None if end is None else end.end_ms,
        "home": s.home,
        "id": [
            s.engine_run_id,
            s.task_id,
            s.namespace,
            s.workflow_type,
            s.workflow_version,
            s.workflow_instance,
        ],
        "principal": s.principal,
        "start": [s.start_time, s.start_ms, s.nominal_start_time, s.nominal_end_time],
        "supersedes": s.supersedes,
        "run": _jobrun_out(s.run),
        "parent": _jobrun_out(s.parent),
        "root": _jobrun_out(s.root),
        "pos": list(s.start_position),
        "in": [[d.namespace, d.name, d.version, d.declared_at] for d in s.inputs],
        "out": [[d.namespace, d.name, d.version, d.declared_at] for d in s.outputs],
        "at_start": [s.inputs_at_start, s.outputs_at_start],
        "end": None
        if end is None
        else [
            end.status,
            end.end_time,
            end.error_message,
            end.error_type,
            end.stack_trace,
            list(end.position),
        ],
        "path": s.job_path,
        "last": s.last_offset,
    }


_q = json.encoder.encode_basestring  # the C function json.dumps(..., ensure_ascii=False) uses


def _opt(v: str | None) -> str:
    return "null" if v is None else _q(v)


def _jobrun_json(j: JobRun | None) -> str:
    return "null" if j is None else f"[{_q(j.namespace)},{_q(j.name)},{_q(j.run_id)}]"


def _datasets_json(refs: tuple[DatasetRef, ...]) -> str:
    return (
        "["
        + ",".join(f"[{_q(d.namespace)},{_q(d.name)},{_opt(d.version)},{d.declared_at}]" for d in refs)
        + "]"
    )


def dumps_state(s: RunState) -> bytes:
    """Compact JSON of `state_document`, written directly (about half json.dumps' time; the bytes
    are the same: tests/unit/streams/test_mapping_fuzz.py); starts with ``{"end_ms":`` so a scan
    can find finished runs without parsing."""
    end = s.end
    if end is None:
        end_ms = ended = "null"
    else:
        end_ms = str(end.end_ms)
        ended = (
            f"[{_q(end.status)},{_q(end.end_time)},{_opt(end.error_message)},{_opt(end.error_type)},"
            f"{_opt(end.stack_trace)},[{end.position[0]},{end.position[1]}]]"
        )
    return (
        f'{{"end_ms":{end_ms},"home":{s.home},"id":[{_q(s.engine_run_id)},{_q(s.task_id)},'
        f"{_q(s.namespace)},{_q(s.workflow_type)},{_q(s.workflow_version)},{_q(s.workflow_instance)}],"
        f'"principal":{_opt(s.principal)},"start":[{_q(s.start_time)},{s.start_ms},'
        f'{_opt(s.nominal_start_time)},{_opt(s.nominal_end_time)}],"supersedes":{_opt(s.supersedes)},'
        f'"run":{_jobrun_json(s.run)},"parent":{_jobrun_json(s.parent)},"root":{_jobrun_json(s.root)},'
        f'"pos":[{s.start_position[0]},{s.start_position[1]}],"in":{_datasets_json(s.inputs)},'
        f'"out":{_datasets_json(s.outputs)},"at_start":[{s.inputs_at_start},{s.outputs_at_start}],'
        f'"end":{ended},"path":{_opt(s.job_path)},"last":{s.last_offset}}}'
    ).encode()


def loads_state(raw: bytes) -> RunState:
    d = json.loads(raw)
    ident, start, end = d["id"], d["start"], d["end"]
    run = _jobrun_in(d["run"])
    assert run is not None
    return RunState(
        engine_run_id=ident[0],
        task_id=ident[1],
        namespace=ident[2],
        workflow_type=ident[3],
        workflow_version=ident[4],
        workflow_instance=ident[5],
        principal=d["principal"],
        start_time=start[0],
        start_ms=start[1],
        nominal_start_time=start[2],
        nominal_end_time=start[3],
        supersedes=d["supersedes"],
        run=run,
        parent=_jobrun_in(d["parent"]),
        root=_jobrun_in(d["root"]),
        start_position=(d["pos"][0], d["pos"][1]),
        inputs=tuple(DatasetRef(*x) for x in d["in"]),  # 3 fields in a state stored before `declared_at`
        outputs=tuple(DatasetRef(*x) for x in d["out"]),
        inputs_at_start=d["at_start"][0],
        outputs_at_start=d["at_start"][1],
        end=None
        if end is None
        else RunEnd(end[0], end[1], d["end_ms"], end[2], end[3], end[4], (end[5][0], end[5][1])),
        home=d["home"],
        job_path=d.get("path"),
        # a state stored before `last_offset` existed: its last change is its end, else its start
        last_offset=d.get("last", d["pos"][1] if end is None else max(d["pos"][1], end[5][1])),
    )


def finished_end_ms(raw: bytes) -> int | None:
    """The end time of a serialized finished run, or None for an open run (cheap prefix parse)."""
    head = raw[: raw.find(b",")]
    value = head[len(b'{"end_ms":') :]
    return None if value == b"null" else int(value)
