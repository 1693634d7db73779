"""Marquez's acceptance and job-tree rules, for a test receiver (Marquez cannot run in CI here).

Read from Marquez's source (0.4x-0.51, MarquezProject/marquez):

- ``OpenLineageResource.create``: 201 on success. Bean validation of ``LineageEvent`` (422 here):
  ``eventTime``, ``producer``, ``run.runId``, ``job.namespace``, ``job.name`` and every dataset's
  ``namespace``/``name`` are required; every facet Marquez knows needs ``_producer`` and ``_schemaURL``;
  the parent facet needs ``run.runId``, ``job.namespace``, ``job.name``; jobType needs ``processingType``,
  ``integration`` and ``jobType``; nominalTime needs ``nominalStartTime``. An ``IllegalArgumentException``
  while applying the event answers 400 with Jetty's HTML page: ``NamespaceName.of`` on a dataset namespace
  outside ``^[a-zA-Z:;=/0-9_\\-\\.@+]{1,1024}$``, ``DatasetName.of`` on a blank name.
- ``OpenLineageDao.updateBaseMarquezModel``: the job namespace is stored through ``formatNamespaceName``
  (other characters become ``_``). With a parent facet, the parent run's job is looked up
  (``findParentJobRow``) and must have the facet's namespace and the facet's job name (its *full* stored
  name); else Marquez logs "Assuming Run UUID conflict" and creates a phantom parent job and run. A parent
  run that does not exist yet is created, on a job named by the facet, in the *child's* namespace. The
  child's simple name is its name without ``{parent full name}.``; its stored (full) name is
  ``{parent full name}.{simple name}`` (the jobs trigger of ``R__1_Jobs_view_and_rewrite_function.sql``).
- Runs: the state of the last event processed wins (no eventTime check); every POST is kept.
- Run times (``updateBaseMarquezModel``, ``RunDao.updateStartState`` / ``updateEndState``): START, RUNNING
  and any other non-terminal type map to the run state RUNNING (``getRunState``), and every event in that
  state sets the run's ``started_at`` to its ``eventTime``, the last one processed winning; a terminal
  event sets ``ended_at`` the same way. A parent run created from a child's facet gets neither.
- Datasets: source = the ``dataSource`` facet's name, else ``"default"``; type always DB_TABLE.
- Sources (``SourceDao.upsert``, ``OpenLineageDao.getUrlOrNull``): every dataset's facet upserts its source
  and replaces its connection URL with the facet's ``uri`` as ``java.net.URI`` reads it (else
  ``http://{uri}``, else null). A facet without ``uri`` stores null, and then ``GET /api/v1/sources`` and
  ``/api/v1/sources/{name}`` answer 500 (``connectionUrl is marked non-null but is null``), as 0.51.1 does.
- Job versions (``updateMarquezOnComplete``, ``linkJobToJobVersion = runState.isDone()``): every terminal
  event (COMPLETE, FAIL, ABORT) *received* makes its run's version the job's current one, whatever its
  ``eventTime``; the version's inputs and outputs are the union of the datasets of all the run's events.
- Runs' datasets: a run's inputs and outputs (``runs_input_mapping``, the run's output dataset
  versions) grow with every event of the run, RUNNING included, and never shrink while it runs. When
  a run ends (COMPLETE, FAIL, ABORT: ``updateMarquezOnComplete``, ``linkJobToJobVersion =
  runState.isDone()``),
  the job version is computed from the union of the run's datasets (``loadJobRowRunDetails``,
  ``Utils.newJobVersionFor``: namespace, name and the sorted dataset ids) and becomes the job's
  current version: the last terminal event received sets the job's inputs and outputs.

Rejected events change nothing here (Marquez may write part of one: this receiver is stricter).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from olstream.contract.naming import is_absolute_uri
from tests.support.receiver import Reply, Request

NAMESPACE_NAME = re.compile(r"[a-zA-Z:;=/0-9_\-.@+]{1,1024}")
FORMAT_NAMESPACE = re.compile(r"[^a-z:/A-Z0-9\-_.@+]")
RUN_STATES = {"start": "RUNNING", "running": "RUNNING", "complete": "COMPLETED", "abort": "ABORTED",
              "fail": "FAILED"}  # fmt: skip
KNOWN_RUN_FACETS = ("nominalTime", "parent", "parentRun")
KNOWN_JOB_FACETS = ("documentation", "sourceCodeLocation", "sql", "jobType")
KNOWN_DATASET_FACETS = ("documentation", "schema", "dataSource", "lifecycleStateChange", "columnLineage",
                        "symlinks")  # fmt: skip
JETTY_400 = (
    b"<html><head><title>Error 400 Bad Request</title></head><body><h2>HTTP ERROR 400</h2></body></html>"
)

JobKey = tuple[str, str]  # (stored namespace, stored full name)
DatasetKey = tuple[str, str]  # (namespace, name)
TERMINAL_STATES = frozenset({"COMPLETED", "FAILED", "ABORTED"})
URI_REFERENCE = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?#%]*")
SOURCES_PATH = "/api/v1/sources"


class Invalid(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class Job:
    namespace: str
    name: str  # the full name
    simple_name: str
    parent: JobKey | None = None
    version: str | None = None  # the current job version, linked by the last run that ended
    inputs: tuple[DatasetKey, ...] = ()  # of the current version, sorted
    outputs: tuple[DatasetKey, ...] = ()


@dataclass
class Run:
    job: JobKey
    state: str | None
    parent_run: str | None = None
    external_id: str = ""
    inputs: dict[DatasetKey, None] = field(default_factory=dict)  # every event's, in arrival order
    outputs: dict[DatasetKey, None] = field(default_factory=dict)
    job_version: str | None = None  # the version its end linked to its job
    started_at: str | None = None  # eventTime of the last START/RUNNING event processed (updateStartState)
    ended_at: str | None = None  # eventTime of the last terminal event processed (updateEndState)


@dataclass(frozen=True)
class JobVersion:
    """A job's current version: the run whose terminal event was received last, and that run's datasets."""

    run: str  # the run's UUID
    inputs: frozenset[DatasetKey]
    outputs: frozenset[DatasetKey]


@dataclass
class Rejection:
    status: int
    reason: str
    body: bytes


@dataclass
class MarquezModel:
    jobs: dict[JobKey, Job] = field(default_factory=dict)
    runs: dict[str, Run] = field(default_factory=dict)
    datasets: dict[tuple[str, str], str] = field(default_factory=dict)  # (namespace, name) -> source name
    sources: dict[str, str | None] = field(default_factory=dict)  # name -> connection URL (None: null)
    job_versions: dict[JobKey, JobVersion] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    accepted: int = 0


def run_uuid(run_id: str) -> str:
    """Marquez's ``runToUuid``: the UUID itself, else ``UUID.nameUUIDFromBytes`` (MD5, version 3)."""
    try:
        return str(uuid.UUID(run_id))
    except ValueError:
        digest = bytearray(hashlib.md5(run_id.encode("utf-8")).digest())
        digest[6] = (digest[6] & 0x0F) | 0x30
        digest[8] = (digest[8] & 0x3F) | 0x80
        return str(uuid.UUID(bytes=bytes(digest)))


def parse_parent_job_name(name: str) -> str:
    """``Utils.parseParentJobName``: the text before the last dot, or the whole name."""
    return name.rsplit(".", 1)[0] if "." in name else name


def _require(value: Any, what: str) -> Any:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise Invalid(422, f"{what} must not be null")
    return value


def _check_facets(facets: Any, known: tuple[str, ...], where: str) -> None:
    if facets is None:
        return
    if not isinstance(facets, dict):
        raise Invalid(400, f"{where} facets are not an object")
    for key in known:
        facet = facets.get(key)
        if facet is None:
            continue
        _require(facet.get("_producer"), f"{where} facet {key}._producer")
        _require(facet.get("_schemaURL"), f"{where} facet {key}._schemaURL")


def validate(doc: Any) -> None:
    """Raise Invalid for what Marquez answers 4xx; accept everything else."""
    if not isinstance(doc, dict):
        raise Invalid(400, "not a JSON object")
    event_time = _require(doc.get("eventTime"), "eventTime")
    try:
        if datetime.fromisoformat(str(event_time).replace("Z", "+00:00")).tzinfo is None:
            raise Invalid(400, "eventTime without an offset")
    except ValueError as e:
        raise Invalid(400, f"eventTime: {e}") from None
    _require(doc.get("producer"), "producer")
    run, job = _require(doc.get("run"), "run"), _require(doc.get("job"), "job")
    _require(run.get("runId"), "run.runId")
    _require(job.get("namespace"), "job.namespace")
    _require(job.get("name"), "job.name")
    run_facets = run.get("facets") or {}
    _check_facets(run_facets, KNOWN_RUN_FACETS, "run")
    parent = run_facets.get("parent")
    if parent is not None:
        _require((parent.get("run") or {}).get("runId"), "parent.run.runId")
        _require((parent.get("job") or {}).get("namespace"), "parent.job.namespace")
        _require((parent.get("job") or {}).get("name"), "parent.job.name")
    if run_facets.get("nominalTime") is not None:
        _require(run_facets["nominalTime"].get("nominalStartTime"), "nominalTime.nominalStartTime")
    job_facets = job.get("facets") or {}
    _check_facets(job_facets, KNOWN_JOB_FACETS, "job")
    if job_facets.get("jobType") is not None:
        for name in ("processingType", "integration", "jobType"):
            _require(job_facets["jobType"].get(name), f"jobType.{name}")
    for side in ("inputs", "outputs"):
        for ds in doc.get(side) or []:
            namespace = _require(ds.get("namespace"), f"{side}[].namespace")
            _require(ds.get("name"), f"{side}[].name")
            _check_facets(ds.get("facets"), KNOWN_DATASET_FACETS, f"{side} dataset")
            if NAMESPACE_NAME.fullmatch(namespace) is None:
                raise Invalid(400, f"IllegalArgumentException: namespace {namespace!r} (NamespaceName)")


class MarquezRules:
    """A `Receiver` responder that answers and stores events the way Marquez does."""

    def __init__(self) -> None:
        self.model = MarquezModel()
        self._lock = threading.Lock()

    def __call__(self, request: Request, n: int) -> Reply:
        if request.method == "GET":
            with self._lock:
                return self._read(request.path)
        try:
            doc = json.loads(request.body)
            validate(doc)
        except (Invalid, ValueError, AttributeError, TypeError) as e:
            status = e.status if isinstance(e, Invalid) else 400
            with self._lock:
                self.model.rejections.append(Rejection(status, str(e), request.body))
            return Reply(status, JETTY_400, (("Content-Type", "text/html;charset=iso-8859-1"),))
        with self._lock:
            self._apply(doc)
            self.model.accepted += 1
        return Reply(201)

    # -- OpenLineageDao.updateBaseMarquezModel, the parts that place jobs, runs and datasets ----------
    def _upsert_job(self, namespace: str, simple: str, parent: Job | None) -> Job:
        full = f"{parent.name}.{simple}" if parent is not None else simple
        key = (namespace, full)
        job = self.model.jobs.get(key)
        if job is None:
            job = self.model.jobs[key] = Job(namespace, full, simple, None if parent is None else
                                             (parent.namespace, parent.name))  # fmt: skip
        elif parent is not None:
            job.parent = job.parent or (parent.namespace, parent.name)
            job.simple_name = simple
        else:
            job.simple_name = job.name
        return job

    def _parent_job(self, doc: dict[str, Any], namespace: str, state: str | None) -> Job | None:
        facet = (doc["run"].get("facets") or {}).get("parent")
        if facet is None:
            return None
        parent_uuid = run_uuid(facet["run"]["runId"])
        facet_ns, facet_name = facet["job"]["namespace"], facet["job"]["name"]
        wanted = parse_parent_job_name(facet_name) if facet_name == doc["job"]["name"] else facet_name
        parent_run = self.model.runs.get(parent_uuid)
        if parent_run is not None:
            job = self.model.jobs[parent_run.job]
            if job.namespace == facet_ns and job.name == wanted:
                return job
            conflict = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{facet_ns}.{wanted}.{parent_uuid}"))
            self.model.warnings.append(
                f"Parent Run id {parent_uuid} has a different job name '{job.namespace}.{job.name}' from "
                f"facet '{facet_ns}.{wanted}'. Assuming Run UUID conflict and generating a new UUID "
                f"{conflict}"
            )
            parent_uuid = conflict
            if parent_uuid in self.model.runs:
                return self.model.jobs[self.model.runs[parent_uuid].job]
        # the parent run is not there (yet): Marquez creates it, on a job of the child's namespace
        job = self._upsert_job(namespace, wanted, None)
        self.model.runs[parent_uuid] = Run((job.namespace, job.name), state, None, facet["run"]["runId"])
        return job

    def _apply(self, doc: dict[str, Any]) -> None:
        namespace = FORMAT_NAMESPACE.sub("_", doc["job"]["namespace"])
        event_type = doc.get("eventType")
        state = None if event_type is None else RUN_STATES.get(str(event_type).lower(), "RUNNING")
        parent = self._parent_job(doc, namespace, state)
        name = doc["job"]["name"]
        simple = name
        if parent is not None and name.startswith(parent.name + "."):
            simple = name[len(parent.name) + 1 :]
        job = self._upsert_job(namespace, simple, parent)
        uid = run_uuid(doc["run"]["runId"])
        facet = (doc["run"].get("facets") or {}).get("parent")
        run = self.model.runs.get(uid)
        if run is None:
            self.model.runs[uid] = Run((job.namespace, job.name), state,
                                       None if facet is None else run_uuid(facet["run"]["runId"]),
                                       doc["run"]["runId"])  # fmt: skip
        elif state is not None:
            run.state = state  # the job of an existing run is never changed (ON CONFLICT(uuid))
        run = self.model.runs[uid]
        if state == "RUNNING":
            run.started_at = str(doc["eventTime"])
        elif state in TERMINAL_STATES:
            run.ended_at = str(doc["eventTime"])
        for side, mapping in (("inputs", run.inputs), ("outputs", run.outputs)):
            for ds in doc.get(side) or []:
                facet = (ds.get("facets") or {}).get("dataSource")
                if facet is None:
                    source = "default"
                    self.model.sources.setdefault(source, "")  # upsertOrDefault: only created
                else:
                    source = facet.get("name") or "default"
                    self.model.sources[source] = connection_url(facet.get("uri"))  # replaced every time
                self.model.datasets[(ds["namespace"], ds["name"])] = source
                mapping[(ds["namespace"], ds["name"])] = None
        if state in TERMINAL_STATES:
            self.model.job_versions[run.job] = JobVersion(uid, frozenset(run.inputs), frozenset(run.outputs))
            self._link_job_version(self.model.jobs[run.job], run)

    def _link_job_version(self, job: Job, run: Run) -> None:
        """``upsertJobVersionOnRunTransition`` with ``linkJobToJobVersion``: the union of the run's
        datasets names the version, which becomes the job's current one."""
        job.inputs, job.outputs = tuple(sorted(run.inputs)), tuple(sorted(run.outputs))
        ids = [job.namespace, job.name, *(f"{n}:{d}" for n, d in job.inputs), "|",
               *(f"{n}:{d}" for n, d in job.outputs)]  # fmt: skip
        job.version = run.job_version = str(uuid.uuid3(uuid.NAMESPACE_OID, "\x1f".join(ids)))

    # -- GET /api/v1/sources, /api/v1/sources/{name} (SourceResource) -------------------------------
    def _read(self, path: str) -> Reply:
        json_type = (("Content-Type", "application/json"),)
        route = path.split("?", 1)[0]
        sources = self.model.sources
        if route == SOURCES_PATH:
            if any(url is None for url in sources.values()):
                return _null_connection_url()
            body = {"sources": [_source_json(name, url) for name, url in sorted(sources.items())]}
            return Reply(200, json.dumps(body).encode(), json_type)
        if route.startswith(SOURCES_PATH + "/"):
            name = unquote(route[len(SOURCES_PATH) + 1 :])
            if name not in sources:
                body = {"code": 404, "message": f"Source '{name}' not found."}
                return Reply(404, json.dumps(body).encode(), json_type)
            url = sources[name]
            if url is None:
                return _null_connection_url()
            return Reply(200, json.dumps(_source_json(name, url)).encode(), json_type)
        return Reply(404, b'{"code":404,"message":"HTTP 404 Not Found"}', json_type)

    # -- reading it back -------------------------------------------------------------------------------
    def snapshot(self) -> MarquezModel:
        with self._lock:
            m = self.model
            return MarquezModel(copy.deepcopy(m.jobs), copy.deepcopy(m.runs), dict(m.datasets),
                                dict(m.sources), dict(m.job_versions), list(m.warnings),
                                list(m.rejections), m.accepted)  # fmt: skip


def _java_parses(uri: str) -> bool:
    """Whether ``new java.net.URI(uri)`` accepts it (close enough for the forms events carry)."""
    if ":" in uri.split("/", 1)[0] and not uri.startswith(":"):
        return is_absolute_uri(uri)
    return URI_REFERENCE.fullmatch(uri) is not None and not uri.startswith(":")


def connection_url(uri: str | None) -> str | None:
    """``OpenLineageDao.getUrlOrNull``: the URI as Java reads it, else ``http://{uri}``, else null."""
    if uri is None:
        return None
    if _java_parses(uri):
        return uri
    return f"http://{uri}" if _java_parses(f"http://{uri}") else None


def _source_json(name: str, url: str) -> dict[str, Any]:
    return {"type": "POSTGRESQL", "name": name, "connectionUrl": url, "description": None}


def _null_connection_url() -> Reply:
    body = {"code": 500, "message": "connectionUrl is marked non-null but is null"}
    return Reply(500, json.dumps(body).encode(), (("Content-Type", "application/json"),))


def _event_rank(e: dict[str, Any]) -> tuple[datetime, str]:
    return datetime.fromisoformat(str(e["eventTime"]).replace("Z", "+00:00")), str(e["run"]["runId"])


def stale_job_versions(model: MarquezModel, events: list[dict[str, Any]]) -> list[str]:
    """Every job whose current version is not its latest run's; empty when each job is right.

    The latest run of a job is the one whose terminal event has the latest ``eventTime`` (ties: the
    greater runId). Its version must be current, with the union of that run's events' datasets.
    """
    latest: dict[JobKey, dict[str, Any]] = {}
    datasets: dict[str, tuple[set[DatasetKey], set[DatasetKey]]] = {}
    for e in events:
        ins, outs = datasets.setdefault(e["run"]["runId"], (set(), set()))
        ins.update((d["namespace"], d["name"]) for d in e.get("inputs") or [])
        outs.update((d["namespace"], d["name"]) for d in e.get("outputs") or [])
        if e["eventType"] not in ("COMPLETE", "FAIL", "ABORT"):
            continue
        key = (FORMAT_NAMESPACE.sub("_", e["job"]["namespace"]), e["job"]["name"])
        if key not in latest or _event_rank(e) > _event_rank(latest[key]):
            latest[key] = e
    problems: list[str] = []
    for key, e in sorted(latest.items()):
        version = model.job_versions.get(key)
        run_id = e["run"]["runId"]
        if version is None:
            problems.append(f"job {key} has no current version; its latest run is {run_id}")
            continue
        if version.run != run_uuid(run_id):
            problems.append(f"job {key} is at run {version.run}, its latest run is {run_id}")
            continue
        ins, outs = datasets[run_id]
        if (version.inputs, version.outputs) != (frozenset(ins), frozenset(outs)):
            problems.append(f"job {key} at run {run_id} has other datasets than that run's events")
    return problems


def misplaced_runs(model: MarquezModel, events: list[dict[str, Any]]) -> list[str]:
    """Every way the stored tree differs from what the events mean; empty when every run is right.

    Each run must sit on the job its events name, that job under the job its parent facet names (or
    no parent), its state that of its terminal event (a START after it reopens the run), else RUNNING;
    no job may exist that no event names (a phantom), and Marquez must have logged no UUID conflict.
    """
    problems: list[str] = []
    last: dict[str, dict[str, Any]] = {}
    for e in events:
        if last.get(e["run"]["runId"], {}).get("eventType", "START") in ("START", "RUNNING"):
            last[e["run"]["runId"]] = e
    named: set[JobKey] = set()
    for run_id, e in last.items():
        ns = FORMAT_NAMESPACE.sub("_", e["job"]["namespace"])
        key = (ns, e["job"]["name"])
        named.add(key)
        run = model.runs.get(run_uuid(run_id))
        if run is None:
            problems.append(f"run {run_id} not stored")
            continue
        if run.job != key:
            problems.append(f"run {run_id} of {key} is on job {run.job}")
        job = model.jobs.get(key)
        if job is None:
            problems.append(f"job {key} not stored")
            continue
        facet = e["run"].get("facets", {}).get("parent")
        want_parent = None if facet is None else (facet["job"]["namespace"], facet["job"]["name"])
        if job.parent != want_parent:
            problems.append(f"job {key} has parent {job.parent}, its events say {want_parent}")
        state = RUN_STATES[e["eventType"].lower()]
        if run.state != state:
            problems.append(f"run {run_id} is {run.state}, its last event says {state}")
    phantoms = set(model.jobs) - named
    problems += [f"phantom job {key}" for key in sorted(phantoms)]
    problems += model.warnings
    return problems
