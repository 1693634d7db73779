"""Names the record contract carries: namespaces receivers accept, and hierarchical job paths.

Both the writer API (before a record is written) and the stream worker (for records written by
other writers) apply these rules, so a namespace means the same thing everywhere.

**Namespaces.** A namespace is a URI (OpenLineage's naming conventions: ``postgres://host:5432``,
``s3://bucket``, ``bigquery``, ``file``). Receivers restrict them further: Marquez accepts
``[A-Za-z0-9_@+\\-:=;/.]``, 1 to 1024 characters, and answers 400 otherwise (``NamespaceName``).
`normalize_namespace` keeps every ASCII namespace as it is and gives the one standard ASCII form of
a non-ASCII host: IDNA 2008 with UTS #46 mapping (``s3://données`` -> ``s3://xn--donnes-bva``). Any
other character outside that set, non-ASCII or not, cannot be a namespace: percent-encoding would
give a ``%``, which Marquez rejects as well, so the namespace is refused with a clear error instead.

Job namespaces (a run's own, its parent's and its root's) may not contain ``=`` or ``;`` either:
Marquez accepts them there but rewrites them to ``_``, which breaks its parent lookup.

**Job paths.** A run's job path is the ``{type}@{version}`` segment of every run from its tree's
root down to itself, joined by ``.`` (``ingest@1.enrich@2``); the worker's job name is its job
prefix followed by the path. A path longer than `MAX_JOB_PATH_BYTES` is not extended: that run
starts a new path of its own segment (and the worker emits it without a parent facet).
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache
from urllib.parse import quote

import idna

from olstream.contract.records import RunRef

NAMESPACE_CHARS = re.compile(r"[A-Za-z0-9_@+\-:=;/.]{1,1024}")
MAX_NAMESPACE_CHARS = 1024
MAX_JOB_PATH_BYTES = 1024
_SCHEME_AUTHORITY = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)([^/?#]*)(.*)", re.DOTALL)
JOB_NAMESPACE_REWRITTEN = "=;"  # Marquez's formatNamespaceName turns these into _ in job namespaces


class NamespaceError(ValueError):
    """A namespace that has no form receivers accept; the message names the reason."""


def _ascii_host(authority: str) -> str:
    """`authority` (``[user@]host[:port]``) with a non-ASCII host in IDNA form."""
    user, at, hostport = authority.rpartition("@")
    host, colon, port = hostport.partition(":")
    if host.isascii():
        return authority
    try:
        ascii_host = idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError as e:
        raise NamespaceError(f"host {host!r} has no IDNA form: {e}") from None
    return f"{user}{at}{ascii_host}{colon}{port}"


@lru_cache(maxsize=4096)
def normalize_namespace(namespace: str) -> str:
    """The namespace receivers accept, or NamespaceError saying why there is none (cached: few distinct)."""
    if not namespace:
        raise NamespaceError("a namespace must not be empty")
    normalized = namespace
    if not namespace.isascii():
        match = _SCHEME_AUTHORITY.fullmatch(namespace)
        if match is not None:
            scheme, authority, rest = match.groups()
            normalized = scheme + _ascii_host(authority) + rest
    if NAMESPACE_CHARS.fullmatch(normalized) is None:
        if len(normalized) > MAX_NAMESPACE_CHARS:
            raise NamespaceError(
                f"a namespace has at most {MAX_NAMESPACE_CHARS} characters, got {len(normalized)}"
            )
        bad = next(ch for ch in normalized if NAMESPACE_CHARS.fullmatch(ch) is None)
        raise NamespaceError(
            f"namespace {namespace!r} has {bad!r}: allowed are letters A-Z a-z, digits and _ @ + - : = ; / . "
            "(a non-ASCII host is written in its IDNA form; nothing else is rewritten)"
        )
    return normalized


@lru_cache(maxsize=4096)
def normalize_job_namespace(namespace: str) -> str:
    """A job namespace: a namespace without ``=`` and ``;``, which Marquez rewrites in job namespaces
    (its parent lookup then compares the rewritten name with the facet's and files a phantom)."""
    normalized = normalize_namespace(namespace)
    bad = next((ch for ch in normalized if ch in JOB_NAMESPACE_REWRITTEN), None)
    if bad is not None:
        raise NamespaceError(
            f"job namespace {namespace!r} has {bad!r}: Marquez rewrites = and ; in job namespaces to _"
        )
    return normalized


def with_job_namespace(ref: RunRef) -> RunRef:
    """`ref` with its (job) namespace normalized; NamespaceError when it has no accepted form."""
    if ref.namespace is None:
        return ref
    namespace = normalize_job_namespace(ref.namespace)
    return ref if namespace == ref.namespace else replace(ref, namespace=namespace)


# RFC 3986, section 3: absolute-URI = scheme ":" hier-part [ "?" query ] (no fragment)
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR_SET = r"A-Za-z0-9\-._~!$&'()*+,;=:@"
_PCHAR = rf"(?:[{_PCHAR_SET}]|{_PCT})"
_AUTHORITY = (
    rf"(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|{_PCT})*@)?"  # userinfo
    rf"(?:\[[A-Za-z0-9\-._~!$&'()*+,;=:]+\]|(?:[A-Za-z0-9\-._~!$&'()*+,;=]|{_PCT})*)"  # IP literal, reg-name
    r"(?::[0-9]*)?"
)
ABSOLUTE_URI = re.compile(
    rf"[A-Za-z][A-Za-z0-9+\-.]*:"
    rf"(?://{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_PCHAR}+(?:/{_PCHAR}*)*|)"
    rf"(?:\?(?:{_PCHAR}|[/?])*)?"
)
URI_SCHEME_NAME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
NAMESPACE_URN = "urn:olstream:namespace:"
_URN_SAFE = "-._~!$&'()*+,;=:@/"  # pchar and "/", kept as they are; everything else percent-encoded


def is_absolute_uri(text: str) -> bool:
    """True for an absolute URI that RFC 3986 and Java's `java.net.URI` (Marquez) both accept.

    Java refuses two forms RFC 3986 allows: nothing after the scheme (``bigquery:``) and an empty
    authority without a path (``s3://``).
    """
    if ABSOLUTE_URI.fullmatch(text) is None:
        return False
    rest = text.partition(":")[2]
    return rest not in ("", "//")


@lru_cache(maxsize=4096)
def source_uri(namespace: str) -> str:
    """The `uri` of a dataset namespace's `dataSource` facet: always an absolute URI.

    - A namespace that is an absolute URI is its own URI (``postgres://db:5432``, ``s3://bucket``).
    - A bare name that can be a URI scheme gets an empty authority and the root path:
      ``file`` -> ``file:///`` (RFC 8089's local file system), ``bigquery`` -> ``bigquery:///``.
    - Anything else is named in olstream's URN: ``my_lake`` -> ``urn:olstream:namespace:my_lake``
      (characters a URI path cannot hold are percent-encoded; a valid namespace has none).
    """
    if is_absolute_uri(namespace):
        return namespace
    if URI_SCHEME_NAME.fullmatch(namespace) is not None:
        return f"{namespace}:///"
    return NAMESPACE_URN + quote(namespace, safe=_URN_SAFE)


def job_segment(workflow_type: str, workflow_version: str) -> str:
    """One run's own part of a job path (today's flat job name without prefix)."""
    return f"{workflow_type}@{workflow_version}"


def path_ends_with(path: str, segment: str) -> bool:
    """True when `path` can be the job path of a run whose own segment is `segment`."""
    return path == segment or path.endswith("." + segment)


def child_job_path(parent_path: str, segment: str) -> tuple[str, bool]:
    """(the child's job path, whether it extends its parent's): a path over the limit starts anew."""
    path = f"{parent_path}.{segment}"
    if len(path.encode("utf-8")) > MAX_JOB_PATH_BYTES:
        return segment, False
    return path, True


def parent_path_on_record(parent: RunRef, root: RunRef | None) -> str | None:
    """The parent's job path from a child's record alone (no state, so no timing), or None.

    A complete reference's `job_name` when it ends with the parent's own segment; the parent's
    segment when the record names the parent as the root too (a root's path is its segment; this
    covers records written before `job_name` existed). The writer API and the worker both use it,
    so the path a writer claims for a child is the one the worker gives it.
    """
    if not parent.is_complete:
        return None
    assert parent.workflow_type is not None and parent.workflow_version is not None
    segment = job_segment(parent.workflow_type, parent.workflow_version)
    if parent.job_name is not None:
        return parent.job_name if path_ends_with(parent.job_name, segment) else None
    if root is not None and root.engine_run_id == parent.engine_run_id:
        return segment
    return None
