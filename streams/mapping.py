"""Pure mapping: run state -> canonical OpenLineage RunEvent bytes (no faust, no I/O).

Canonical bytes: keys in the fixed order this module writes them, no insignificant
whitespace (``separators=(",", ":")``), non-ASCII kept as UTF-8. The same state
always gives the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import olstream
from olstream.contract.naming import source_uri
from olstream.streams.state import DatasetRef, JobRun, RunState

OPENLINEAGE_SCHEMA_URL = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
DEFAULT_PRODUCER = f"https://github.com/olstream/olstream/tree/{olstream.__version__}"
WORKFLOW_FACET_SCHEMA_URL = "https://olstream.dev/spec/facets/1-0-0/WorkflowRunFacet.json"

PARENT_SCHEMA_URL = "https://openlineage.io/spec/facets/1-2-0/ParentRunFacet.json#/$defs/ParentRunFacet"
NOMINAL_TIME_SCHEMA_URL = (
    "https://openlineage.io/spec/facets/1-0-1/NominalTimeRunFacet.json#/$defs/NominalTimeRunFacet"
)
PROCESSING_ENGINE_SCHEMA_URL = (
    "https://openlineage.io/spec/facets/1-1-1/ProcessingEngineRunFacet.json#/$defs/ProcessingEngineRunFacet"
)
ERROR_MESSAGE_SCHEMA_URL = (
    "https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet"
)
JOB_TYPE_SCHEMA_URL = "https://openlineage.io/spec/facets/2-0-4/JobTypeJobFacet.json#/$defs/JobTypeJobFacet"
DATASET_VERSION_SCHEMA_URL = "https://openlineage.io/spec/facets/1-0-1/DatasetVersionDatasetFacet.json#/$defs/DatasetVersionDatasetFacet"
DATASOURCE_SCHEMA_URL = (
    "https://openlineage.io/spec/facets/1-0-1/DatasourceDatasetFacet.json#/$defs/DatasourceDatasetFacet"
)
JOB_NAMES = ("hierarchical", "flat")

# exact engine status -> OpenLineage eventType of the terminal event
TERMINAL_EVENT_TYPES: dict[str, str] = {
    "completed": "COMPLETE",
    "failed": "FAIL",
    "retries_exhausted": "FAIL",
    "poison": "FAIL",
    "skipped_to_dlq": "FAIL",
    "quarantined": "FAIL",
    "superseded": "ABORT",
    "cancelled": "ABORT",
}


@dataclass(frozen=True, slots=True)
class MappingConfig:
    producer: str = DEFAULT_PRODUCER
    job_prefix: str = ""
    integration: str = "OLSTREAM"
    job_type: str = "WORKFLOW"
    programming_language: str = "PYTHON"
    job_names: str = "hierarchical"  # or "flat": see `olstream.streams.state.start`
    running_events: bool = False  # a RUNNING event per declaration that adds a dataset to an open run

    def __post_init__(self) -> None:
        if self.job_names not in JOB_NAMES:
            raise ValueError(f"job names must be one of {', '.join(JOB_NAMES)}, got {self.job_names!r}")

    @property
    def hierarchical(self) -> bool:
        return self.job_names == "hierarchical"


def canonical_bytes(doc: dict[str, Any]) -> bytes:
    """A JSON document in canonical form: what `event_bytes` writes for the document it encodes."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# The event is written directly as text: the static parts per config are written once
# (`_fragments`), every string value goes through the encoder's own string function
# (``ensure_ascii=False``), so escaping is exactly json.dumps' and the bytes are those of
# ``canonical_bytes(json.loads(...))``.

_q = json.encoder.encode_basestring  # the C function json.dumps(..., ensure_ascii=False) uses


@dataclass(frozen=True, slots=True)
class _Fragments:
    head: str  # '{"eventTime":'
    after_time: str  # ',"producer":...,"eventType":'
    parent: str  # run facets: each without a separating comma
    nominal: str
    engine: str
    workflow: str
    error: str
    job_facets: str  # ',"facets":{"jobType":{...}}}'
    datasource: str  # ',"facets":{"dataSource":{"_producer":...,"_schemaURL":...'
    version: str  # ',"version":{...,"datasetVersion":'


@cache
def _fragments(cfg: MappingConfig) -> _Fragments:
    def prefix(url: str) -> str:
        return f'{{"_producer":{_q(cfg.producer)},"_schemaURL":{_q(url)}'

    ours = _q(olstream.__version__)
    engine = f',"version":{ours},"name":"olstream","openlineageAdapterVersion":{ours}}}'
    job_type = f',"processingType":"BATCH","integration":{_q(cfg.integration)},"jobType":{_q(cfg.job_type)}}}'
    return _Fragments(
        head='{"eventTime":',
        after_time=f',"producer":{_q(cfg.producer)},"schemaURL":{_q(OPENLINEAGE_SCHEMA_URL)},"eventType":',
        parent='"parent":' + prefix(PARENT_SCHEMA_URL),
        nominal='"nominalTime":' + prefix(NOMINAL_TIME_SCHEMA_URL),
        engine='"processing_engine":' + prefix(PROCESSING_ENGINE_SCHEMA_URL) + engine,
        workflow='"workflow":' + prefix(WORKFLOW_FACET_SCHEMA_URL),
        error='"errorMessage":' + prefix(ERROR_MESSAGE_SCHEMA_URL),
        job_facets=',"facets":{"jobType":' + prefix(JOB_TYPE_SCHEMA_URL) + job_type + "}}",
        datasource=',"facets":{"dataSource":' + prefix(DATASOURCE_SCHEMA_URL),
        version=',"version":' + prefix(DATASET_VERSION_SCHEMA_URL) + ',"datasetVersion":',
    )


def _job_ref_json(j: JobRun) -> str:
    return f'{{"namespace":{_q(j.namespace)},"name":{_q(j.name)}}}'


@lru_cache(maxsize=4096)
def _datasource_json(datasource: str, namespace: str) -> tuple[str, str]:
    """(the dataset's opening up to its name, its facets up to the dataSource facet's end)."""
    ns = _q(namespace)
    return f'{{"namespace":{ns},"name":', f'{datasource},"name":{ns},"uri":{_q(source_uri(namespace))}}}'


def _datasets_json(f: _Fragments, refs: tuple[DatasetRef, ...]) -> str:
    parts = []
    for d in refs:
        head, source = _datasource_json(f.datasource, d.namespace)  # str keys: hashes are cached
        if d.version is None:
            parts.append(f"{head}{_q(d.name)}{source}}}}}")
        else:
            parts.append(f"{head}{_q(d.name)}{source}{f.version}{_q(d.version)}}}}}}}")
    return "[" + ",".join(parts) + "]"


@dataclass(frozen=True, slots=True)
class Running:
    """What a RUNNING event carries besides the run: the datasets one declaration added, and the
    declaration's time (the `workflow` facet's `declaredAt`; the event's eventTime is the run's start,
    docs/naming.md, "What Marquez does with START and RUNNING times")."""

    declared_at: str
    inputs: tuple[DatasetRef, ...] = ()
    outputs: tuple[DatasetRef, ...] = ()


def event_bytes(cfg: MappingConfig, s: RunState, terminal: bool, running: Running | None = None) -> bytes:
    """The RunEvent's canonical bytes: START (terminal=False), RUNNING (`running`: the run's facets as on
    its START plus the declaration's time, only the datasets given, and the START's eventTime) or the
    run's terminal event (every dataset)."""
    f = _fragments(cfg)
    end = s.end
    if terminal:
        if end is None:
            raise ValueError(f"run {s.engine_run_id} has not ended: no terminal event")
        event_type, event_time = TERMINAL_EVENT_TYPES[end.status], end.end_time
        inputs, outputs = s.inputs, s.outputs
    elif running is not None:
        event_type, event_time = "RUNNING", s.start_time  # "running since": Marquez's started_at
        inputs, outputs = running.inputs, running.outputs
    else:
        event_type, event_time = "START", s.start_time
        inputs, outputs = s.inputs[: s.inputs_at_start], s.outputs[: s.outputs_at_start]
    facets: list[str] = []
    if s.parent is not None:
        parent = f'{f.parent},"run":{{"runId":{_q(s.parent.run_id)}}},"job":{_job_ref_json(s.parent)}'
        if s.root is not None:
            parent += f',"root":{{"run":{{"runId":{_q(s.root.run_id)}}},"job":{_job_ref_json(s.root)}}}'
        facets.append(parent + "}")
    if s.nominal_start_time is not None:
        nominal = f'{f.nominal},"nominalStartTime":{_q(s.nominal_start_time)}'
        if s.nominal_end_time is not None:
            nominal += f',"nominalEndTime":{_q(s.nominal_end_time)}'
        facets.append(nominal + "}")
    facets.append(f.engine)
    workflow = [
        f.workflow,
        ',"taskId":',
        _q(s.task_id),
        ',"workflowType":',
        _q(s.workflow_type),
        ',"workflowVersion":',
        _q(s.workflow_version),
        ',"workflowInstance":',
        _q(s.workflow_instance),
        ',"engineRunId":',
        _q(s.engine_run_id),
    ]
    if s.principal is not None:
        workflow += [',"principal":', _q(s.principal)]
    if s.supersedes is not None:
        workflow += [',"supersedes":', _q(s.supersedes)]
    if running is not None and not terminal:
        workflow += [',"declaredAt":', _q(running.declared_at)]
    if terminal and end is not None:
        workflow += [',"status":', _q(end.status)]
        if end.error_type is not None:
            workflow += [',"errorType":', _q(end.error_type)]
    workflow.append("}")
    facets.append("".join(workflow))
    if terminal and end is not None and event_type == "FAIL":
        message = end.error_message or f"workflow run ended with status {end.status}"
        error = f'{f.error},"message":{_q(message)},"programmingLanguage":{_q(cfg.programming_language)}'
        if end.stack_trace is not None:
            error += f',"stackTrace":{_q(end.stack_trace)}'
        facets.append(error + "}")
    return "".join(
        (
            f.head,
            _q(event_time),
            f.after_time,
            _q(event_type),
            ',"run":{"runId":',
            _q(s.run.run_id),
            ',"facets":{',
            ",".join(facets),
            '}},"job":{"namespace":',
            _q(s.run.namespace),
            ',"name":',
            _q(s.run.name),
            f.job_facets,
            ',"inputs":',
            _datasets_json(f, inputs),
            ',"outputs":',
            _datasets_json(f, outputs),
            "}",
        )
    ).encode("utf-8")


def start_event(cfg: MappingConfig, s: RunState) -> bytes:
    return event_bytes(cfg, s, terminal=False)


def running_event(cfg: MappingConfig, s: RunState, running: Running) -> bytes:
    return event_bytes(cfg, s, terminal=False, running=running)


def terminal_event(cfg: MappingConfig, s: RunState) -> bytes:
    return event_bytes(cfg, s, terminal=True)


def event_key(s: RunState) -> bytes:
    """The OpenLineage Kafka transport key: ``run:{namespace}/{name}`` of the root job of the run's tree."""
    root = s.tree_root
    return f"run:{root.namespace}/{root.name}".encode()
