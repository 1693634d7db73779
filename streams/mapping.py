"""Pure mapping: run state -> canonical OpenLineage RunEvent bytes (no faust, no I/O).

Canonical bytes: keys in the fixed order this module builds them, no insignificant
whitespace (``separators=(",", ":")``), non-ASCII kept as UTF-8. The same state
always gives the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import olstream
from olstream.contract.naming import has_uri_scheme
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

    def __post_init__(self) -> None:
        if self.job_names not in JOB_NAMES:
            raise ValueError(f"job names must be one of {', '.join(JOB_NAMES)}, got {self.job_names!r}")

    @property
    def hierarchical(self) -> bool:
        return self.job_names == "hierarchical"


def _facet(cfg: MappingConfig, schema_url: str) -> dict[str, Any]:
    return {"_producer": cfg.producer, "_schemaURL": schema_url}


def _job_ref(j: JobRun) -> dict[str, Any]:
    return {"namespace": j.namespace, "name": j.name}


def parent_facet(cfg: MappingConfig, parent: JobRun, root: JobRun | None) -> dict[str, Any]:
    facet = _facet(cfg, PARENT_SCHEMA_URL)
    facet["run"] = {"runId": parent.run_id}
    facet["job"] = _job_ref(parent)
    if root is not None:
        facet["root"] = {"run": {"runId": root.run_id}, "job": _job_ref(root)}
    return facet


def workflow_facet(cfg: MappingConfig, s: RunState, terminal: bool) -> dict[str, Any]:
    facet = _facet(cfg, WORKFLOW_FACET_SCHEMA_URL)
    facet["taskId"] = s.task_id
    facet["workflowType"] = s.workflow_type
    facet["workflowVersion"] = s.workflow_version
    facet["workflowInstance"] = s.workflow_instance
    facet["engineRunId"] = s.engine_run_id
    if s.principal is not None:
        facet["principal"] = s.principal
    if s.supersedes is not None:
        facet["supersedes"] = s.supersedes
    if terminal and s.end is not None:
        facet["status"] = s.end.status
        if s.end.error_type is not None:
            facet["errorType"] = s.end.error_type
    return facet


def run_facets(cfg: MappingConfig, s: RunState, terminal: bool) -> dict[str, Any]:
    facets: dict[str, Any] = {}
    if s.parent is not None:
        facets["parent"] = parent_facet(cfg, s.parent, s.root)
    if s.nominal_start_time is not None:
        nominal = _facet(cfg, NOMINAL_TIME_SCHEMA_URL)
        nominal["nominalStartTime"] = s.nominal_start_time
        if s.nominal_end_time is not None:
            nominal["nominalEndTime"] = s.nominal_end_time
        facets["nominalTime"] = nominal
    engine = _facet(cfg, PROCESSING_ENGINE_SCHEMA_URL)
    engine["version"] = olstream.__version__
    engine["name"] = "olstream"
    engine["openlineageAdapterVersion"] = olstream.__version__
    facets["processing_engine"] = engine
    facets["workflow"] = workflow_facet(cfg, s, terminal)
    end = s.end
    if terminal and end is not None and TERMINAL_EVENT_TYPES[end.status] == "FAIL":
        error = _facet(cfg, ERROR_MESSAGE_SCHEMA_URL)
        error["message"] = end.error_message or f"workflow run ended with status {end.status}"
        error["programmingLanguage"] = cfg.programming_language
        if end.stack_trace is not None:
            error["stackTrace"] = end.stack_trace
        facets["errorMessage"] = error
    return facets


def datasource_facet(cfg: MappingConfig, namespace: str) -> dict[str, Any]:
    """The dataSource facet: named by the namespace, its uri the namespace when that is a URI."""
    facet = _facet(cfg, DATASOURCE_SCHEMA_URL)
    facet["name"] = namespace
    if has_uri_scheme(namespace):
        facet["uri"] = namespace
    return facet


def _datasets(cfg: MappingConfig, refs: tuple[DatasetRef, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for d in refs:
        facets: dict[str, Any] = {"dataSource": datasource_facet(cfg, d.namespace)}
        if d.version is not None:
            version = _facet(cfg, DATASET_VERSION_SCHEMA_URL)
            version["datasetVersion"] = d.version
            facets["version"] = version
        out.append({"namespace": d.namespace, "name": d.name, "facets": facets})
    return out


def build_event(cfg: MappingConfig, s: RunState, terminal: bool) -> dict[str, Any]:
    """The RunEvent as an ordered dict: START (terminal=False) or the terminal event."""
    if terminal:
        if s.end is None:
            raise ValueError(f"run {s.engine_run_id} has not ended: no terminal event")
        event_type, event_time = TERMINAL_EVENT_TYPES[s.end.status], s.end.end_time
        inputs, outputs = s.inputs, s.outputs
    else:
        event_type, event_time = "START", s.start_time
        inputs, outputs = s.inputs[: s.inputs_at_start], s.outputs[: s.outputs_at_start]
    job_type = _facet(cfg, JOB_TYPE_SCHEMA_URL)
    job_type["processingType"] = "BATCH"
    job_type["integration"] = cfg.integration
    job_type["jobType"] = cfg.job_type
    return {
        "eventTime": event_time,
        "producer": cfg.producer,
        "schemaURL": OPENLINEAGE_SCHEMA_URL,
        "eventType": event_type,
        "run": {"runId": s.run.run_id, "facets": run_facets(cfg, s, terminal)},
        "job": {"namespace": s.run.namespace, "name": s.run.name, "facets": {"jobType": job_type}},
        "inputs": _datasets(cfg, inputs),
        "outputs": _datasets(cfg, outputs),
    }


def canonical_bytes(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# ---------------------------------------------------------------- fast path
# The same bytes as ``canonical_bytes(build_event(...))``, written directly: the static parts
# per config are JSON-encoded once, every string value goes through the encoder's own string
# function (``ensure_ascii=False``), so escaping and key order are exactly json.dumps'.

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

    engine = _facet(cfg, PROCESSING_ENGINE_SCHEMA_URL)
    engine["version"] = olstream.__version__
    engine["name"] = "olstream"
    engine["openlineageAdapterVersion"] = olstream.__version__
    job_type = _facet(cfg, JOB_TYPE_SCHEMA_URL)
    job_type["processingType"] = "BATCH"
    job_type["integration"] = cfg.integration
    job_type["jobType"] = cfg.job_type
    return _Fragments(
        head='{"eventTime":',
        after_time=f',"producer":{_q(cfg.producer)},"schemaURL":{_q(OPENLINEAGE_SCHEMA_URL)},"eventType":',
        parent='"parent":' + prefix(PARENT_SCHEMA_URL),
        nominal='"nominalTime":' + prefix(NOMINAL_TIME_SCHEMA_URL),
        engine='"processing_engine":' + json.dumps(engine, separators=(",", ":"), ensure_ascii=False),
        workflow='"workflow":' + prefix(WORKFLOW_FACET_SCHEMA_URL),
        error='"errorMessage":' + prefix(ERROR_MESSAGE_SCHEMA_URL),
        job_facets=',"facets":{"jobType":'
        + json.dumps(job_type, separators=(",", ":"), ensure_ascii=False)
        + "}}",
        datasource=',"facets":{"dataSource":' + prefix(DATASOURCE_SCHEMA_URL),
        version=',"version":' + prefix(DATASET_VERSION_SCHEMA_URL) + ',"datasetVersion":',
    )


def _job_ref_json(j: JobRun) -> str:
    return f'{{"namespace":{_q(j.namespace)},"name":{_q(j.name)}}}'


@lru_cache(maxsize=4096)
def _datasource_json(datasource: str, namespace: str) -> tuple[str, str]:
    """(the dataset's opening up to its name, its facets up to the dataSource facet's end)."""
    ns = _q(namespace)
    uri = f',"uri":{ns}' if has_uri_scheme(namespace) else ""
    return f'{{"namespace":{ns},"name":', f'{datasource},"name":{ns}{uri}}}'


def _datasets_json(f: _Fragments, refs: tuple[DatasetRef, ...]) -> str:
    parts = []
    for d in refs:
        head, source = _datasource_json(f.datasource, d.namespace)  # str keys: hashes are cached
        if d.version is None:
            parts.append(f"{head}{_q(d.name)}{source}}}}}")
        else:
            parts.append(f"{head}{_q(d.name)}{source}{f.version}{_q(d.version)}}}}}}}")
    return "[" + ",".join(parts) + "]"


def _event_bytes(cfg: MappingConfig, s: RunState, terminal: bool) -> bytes:
    f = _fragments(cfg)
    end = s.end
    if terminal:
        if end is None:
            raise ValueError(f"run {s.engine_run_id} has not ended: no terminal event")
        event_type, event_time = TERMINAL_EVENT_TYPES[end.status], end.end_time
        inputs, outputs = s.inputs, s.outputs
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
    return _event_bytes(cfg, s, terminal=False)


def terminal_event(cfg: MappingConfig, s: RunState) -> bytes:
    return _event_bytes(cfg, s, terminal=True)


def event_key(s: RunState) -> bytes:
    """The OpenLineage Kafka transport key: ``run:{namespace}/{name}`` of the root job of the run's tree."""
    root = s.tree_root
    return f"run:{root.namespace}/{root.name}".encode()
