"""Checks of the values the writer API is given: each failure is a ValueError naming the field."""

from __future__ import annotations

from datetime import datetime

from olstream.contract.naming import (
    NamespaceError,
    job_segment,
    normalize_job_namespace,
    normalize_namespace,
    path_ends_with,
    with_job_namespace,
)
from olstream.contract.records import Record, RunRef, RunStatus
from olstream.contract.times import record_time_problems, time_problem


def require_text(field_name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field_name} must be a non-empty string, got {value!r}")
    return value


def optional_text(field_name: str, value: object) -> str | None:
    if value is None:
        return None
    return require_text(field_name, value)


def require_time(field_name: str, value: object) -> datetime:
    """`value` if it is a time a record can carry (aware, within `contract.times`' range)."""
    problem = time_problem(value)
    if problem is not None:
        raise ValueError(f"{field_name} {problem}")
    assert isinstance(value, datetime)
    return value


def optional_time(field_name: str, value: object) -> datetime | None:
    return None if value is None else require_time(field_name, value)


def check_record_times(record: Record) -> None:
    """A ValueError naming the first time of a record built elsewhere that no record can carry."""
    problems = record_time_problems(record)
    if problems:
        field_name, problem = problems[0]
        raise ValueError(f"{type(record).__name__} {field_name} {problem}")


def checked_namespace(field_name: str, value: object, *, job: bool = False) -> str:
    """The namespace in the form receivers accept (`naming`), or a NamespaceError (a ValueError)."""
    try:
        text = require_text(field_name, value)
        return normalize_job_namespace(text) if job else normalize_namespace(text)
    except NamespaceError as e:
        raise NamespaceError(f"{field_name}: {e}") from None


def checked_ref(label: str, ref: RunRef) -> RunRef:
    """`ref` with its namespace normalized; its text fields checked."""
    require_text(f"{label}.engine_run_id", ref.engine_run_id)
    optional_time(f"{label}.start_time", ref.start_time)
    if optional_text(f"{label}.job_name", ref.job_name) is not None and ref.is_complete:
        assert ref.job_name is not None and ref.workflow_type is not None and ref.workflow_version is not None
        segment = job_segment(ref.workflow_type, ref.workflow_version)
        if not path_ends_with(ref.job_name, segment):
            raise ValueError(f"{label}.job_name {ref.job_name!r} does not end with the run's own {segment!r}")
    try:
        return with_job_namespace(ref)
    except NamespaceError as e:
        raise NamespaceError(f"{label}.namespace: {e}") from None


def parse_status(value: RunStatus | str) -> RunStatus:
    """The RunStatus for `value`; a ValueError naming `status` and the allowed values otherwise."""
    if isinstance(value, RunStatus):
        return value
    try:
        return RunStatus(value)
    except ValueError as e:
        allowed = ", ".join(s.value for s in RunStatus)
        raise ValueError(f"status {value!r} is not one of: {allowed}") from e
