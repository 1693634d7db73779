"""Where the sink delivers: the transport chosen from the destination flags and OpenLineage's settings.

`top_section` reads openlineage.yml and the OPENLINEAGE__ variables (`openlineage_config`); once
the transport is chosen (`settings.choose`), `resolve_destination` resolves its settings, each
from its flag, else its `OPENLINEAGE__TRANSPORT__...` variable, else its flat variable
(`OPENLINEAGE_URL`, `OPENLINEAGE_ENDPOINT`, `OPENLINEAGE_API_KEY`; not for a composite's members),
else the file.
Every secret is registered with the log redactor the moment it is read.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olstream.connectors.sink.openlineage_config import (
    COMPRESSIONS,
    Section,
    env_transport,
    find_config_file,
    read_transport_section,
)
from olstream.shared.config import redact_url
from olstream.shared.errors import ConfigError
from olstream.shared.logs import hide_userinfo, register_secret, register_url_credentials

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "api/v1/lineage"
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP token (RFC 9110)
MANAGED_HEADERS = ("content-length", "transfer-encoding", "content-encoding")  # the sink sets them
SECRET_MIN_CHARS = 4  # shorter header values are not secrets the log redactor could usefully hide


@dataclass(frozen=True)
class Choice:
    """The transport the sink runs, where that choice came from, and its settings."""

    kind: str  # http | file | console
    origin: str
    section: Section
    member: str | None = None  # the composite member it is
    flat: bool = True  # OPENLINEAGE_URL / _ENDPOINT / _API_KEY apply (not to a composite's members)


@dataclass(frozen=True)
class Destination:
    """The transport and its settings, and where each came from."""

    transport: str  # http | file | console
    transport_name: str | None = None  # the member of a composite transport
    url: str | None = None  # the URL events are POSTed to (suffix rule applied)
    api_key: str | None = field(default=None, repr=False)
    file_path: str | None = None
    ca_file: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    compression: str | None = None
    timeout: tuple[Any, str] | None = None  # (value, origin) from the variables or the file
    sources: Mapping[str, str] = field(default_factory=dict)


def endpoint_url(url: str, endpoint: str | None) -> str:
    """Apply the suffix rule: append `/api/v1/lineage` unless the URL ends with it or an endpoint is given.

    An explicit endpoint is joined to the URL (unless the URL already ends with it); an empty
    endpoint means "post to the URL exactly as given".
    """
    base = url.strip()
    if not base.startswith(("http://", "https://")):
        shown = redact_url(hide_userinfo(base))
        raise ConfigError(f"OpenLineage URL must start with http:// or https://, got {shown!r}")
    if endpoint is None:
        endpoint = DEFAULT_ENDPOINT
    suffix = endpoint.strip().strip("/")
    trimmed = base.rstrip("/")
    if not suffix or trimmed.endswith("/" + suffix):
        return trimmed if suffix else base
    return f"{trimmed}/{suffix}"


def read_key_file(path: str) -> str:
    try:
        key = Path(path).read_text().strip()
    except OSError as e:
        raise ConfigError(f"cannot read the API key file {path!r}: {e.strerror}") from e
    if not key:
        raise ConfigError(f"the API key file {path!r} is empty")
    return key


def top_section(env: Mapping[str, str], cwd: Path, home: Path) -> Section:
    """The `transport` of the OPENLINEAGE__ variables over openlineage.yml's."""
    cfg_path = find_config_file(env, cwd, home)
    values, names, raws = env_transport(env)
    file_section = read_transport_section(cfg_path) if cfg_path else {}
    return Section(env=values, file=file_section, file_origin=f"file {cfg_path}", names=names, raws=raws)


def resolve_destination(choice: Choice, flags: Mapping[str, Any], env: Mapping[str, str]) -> Destination:
    """The settings of the chosen transport: each from its flag, variables or file."""
    sources = {"transport": choice.origin}
    if choice.kind == "http":
        return _http(choice, flags, env, sources)
    file_path = None
    if choice.kind == "file":
        file_path = _pick(choice, env, sources, "file_path", flags.get("file"), None, "log_file_path")
        if not file_path:
            raise ConfigError("the file transport needs a path (--file or transport.log_file_path)")
    return Destination(choice.kind, choice.member, file_path=file_path, sources=sources)


def _pick(
    choice: Choice,
    env: Mapping[str, str],
    sources: dict[str, str],
    name: str,
    flag: Any,
    flat_var: str | None,
    *path: str,
) -> str | None:
    """A string setting: its flag, else the OPENLINEAGE__ variable, else the flat variable, else the file."""
    value: str | None
    origin: str | None
    if flag not in (None, ""):
        value, origin = str(flag), "flag"
    else:
        value, origin = choice.section.text(*path, layers="env")
        if value is None and choice.flat and flat_var and env.get(flat_var):
            value, origin = env[flat_var], f"env {flat_var}"
        if value is None:
            value, origin = choice.section.text(*path, layers="file")
    if value is not None and origin is not None:
        sources[name] = origin
    return value


def _http(
    choice: Choice, flags: Mapping[str, Any], env: Mapping[str, str], sources: dict[str, str]
) -> Destination:
    s = choice.section
    raw_url = _pick(choice, env, sources, "url", flags.get("url"), "OPENLINEAGE_URL", "url")
    if not raw_url and choice.member:
        raise ConfigError(f"composite member {choice.member!r} (from {choice.origin}) needs a url")
    if not raw_url:
        raise ConfigError(
            "the http transport needs a URL (--url, OPENLINEAGE_URL, OPENLINEAGE__TRANSPORT__URL or "
            "transport.url)"
        )
    register_url_credentials(raw_url)  # before anything can show it, in any form
    endpoint = _pick(
        choice, env, sources, "endpoint", flags.get("endpoint"), "OPENLINEAGE_ENDPOINT", "endpoint"
    )
    url = endpoint_url(raw_url, endpoint)
    api_key = _api_key(choice, flags, env, sources)
    ca_file = _pick(choice, env, sources, "ca_file", flags.get("ca_file"), None, "sslContext", "caCertPath")
    verify, _ = s.get("verify")
    if verify is False:
        log.warning(
            "the OpenLineage transport sets verify: false; olstream always verifies TLS (use --ca-file)"
        )
    headers = _headers(s, sources)
    authorization = next((h for h in headers if h[0].lower() == "authorization"), None)
    if authorization is not None and (api_key or hide_userinfo(url) != url):
        other = f"the API key (from {sources['api_key']})" if api_key else "the URL's user info (Basic auth)"
        raise ConfigError(
            f"the custom header {authorization[0]} (from {sources['custom_headers.' + authorization[0]]}) "
            f"and {other} both set the Authorization header: give one of them"
        )
    compression, where = s.get("compression")
    if compression and compression not in COMPRESSIONS:
        raise ConfigError(
            f"transport.compression {compression!r} (from {where}) is not supported: the only one is gzip"
        )
    if compression:
        sources["compression"] = str(where)
    timeout, where = s.get("timeout")
    return Destination(
        "http",
        choice.member,
        url=url,
        api_key=api_key,
        ca_file=ca_file,
        headers=headers,
        compression=str(compression) if compression else None,
        timeout=(timeout, str(where)) if timeout is not None else None,
        sources=sources,
    )


def _api_key(
    choice: Choice, flags: Mapping[str, Any], env: Mapping[str, str], sources: dict[str, str]
) -> str | None:
    """The API key (--api-key-file, else OPENLINEAGE_API_KEY or `auth.apiKey`), registered as a secret."""
    s = choice.section
    for layer in ("env", "file"):
        auth, where = s.get("auth", layers=layer)
        if auth is not None and not isinstance(auth, Mapping):
            raise ConfigError(f"transport.auth (from {where}) must be a mapping (type: api_key, apiKey: ...)")
    key_file = flags.get("api_key_file")
    if key_file:
        api_key: str | None = read_key_file(str(key_file))
        sources["api_key"] = "flag --api-key-file"
    else:
        api_key = _pick(choice, env, sources, "api_key", None, "OPENLINEAGE_API_KEY", "auth", "apiKey")
        auth_type, where = s.text("auth", "type")
        if auth_type not in (None, "api_key"):
            raise ConfigError(
                f"transport.auth.type {auth_type!r} (from {where}) is not supported: the sink sends an API "
                "key (type api_key) as a bearer token, or the URL's user info as Basic auth"
            )
        if auth_type == "api_key" and not api_key:
            raise ConfigError(f"transport.auth.type api_key (from {where}) needs auth.apiKey")
    register_secret(api_key)
    return api_key


def _headers(section: Section, sources: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """`custom_headers`, checked, their values registered as secrets (they may carry credentials)."""
    out = []
    for name, value, origin in section.headers():
        if not HEADER_NAME.fullmatch(name):
            raise ConfigError(f"custom header name {name!r} (from {origin}) is not a valid HTTP header name")
        if any(c in value for c in "\r\n\0"):
            raise ConfigError(f"the value of custom header {name} (from {origin}) has a line break or NUL")
        if name.lower() in MANAGED_HEADERS:
            hint = " (use transport.compression: gzip)" if name.lower() == "content-encoding" else ""
            raise ConfigError(f"custom header {name} (from {origin}) is set by the sink itself{hint}")
        if len(value) >= SECRET_MIN_CHARS:
            register_secret(value)
        sources[f"custom_headers.{name}"] = origin
        out.append((name, value))
    return tuple(out)
