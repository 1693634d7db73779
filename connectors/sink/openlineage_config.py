"""OpenLineage's own client settings, read the way openlineage-python reads them.

Three sources describe where events go, besides the sink's flags:

- `openlineage.yml` (`$OPENLINEAGE_CONFIG`, else `./openlineage.yml`, else
  `~/.openlineage/openlineage.yml`), its `transport` section;
- the nested variables `OPENLINEAGE__TRANSPORT__...`, parsed as openlineage-python's
  `OpenLineageClient._load_config_from_env_variables` parses them: the name after `OPENLINEAGE__`
  split at `__`, each part lower-cased (`...__AUTH__APIKEY` is `auth.apikey`,
  `...__CUSTOM_HEADERS__X_ORG` is the header `x_org`), each value JSON when it parses as JSON and a
  string otherwise, variables applied in reverse name order so that a shallower variable (a JSON
  object) replaces what deeper ones set;
- the flat variables `OPENLINEAGE_URL`, `OPENLINEAGE_ENDPOINT`, `OPENLINEAGE_API_KEY`, which inside
  a composite transport become its member `default_http`, as openlineage-python aliases them.

One difference, on purpose: openlineage-python lets the file win over `OPENLINEAGE__` variables;
olstream keeps its one rule, flags > environment > file, merging value by value. `Section` is one
transport's settings from the variables over the file; `destination.choose` picks the one to run.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olstream.shared.config import read_yaml
from olstream.shared.errors import ConfigError

log = logging.getLogger(__name__)

ENV_PREFIX = "OPENLINEAGE__"
DISABLED = "OPENLINEAGE_DISABLED"
TRANSPORT_TYPES = ("http", "file", "console")
COMPOSITE = "composite"
DEFAULT_MEMBER = "default_http"  # openlineage-python's member for OPENLINEAGE_URL in a composite
COMPRESSIONS = ("gzip",)
MEMBER_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")  # a suffix of a group id and of a topic name

# The spellings openlineage-python accepts for one key (its env loader lower-cases every key).
SPELLINGS: dict[str, tuple[str, ...]] = {
    "apiKey": ("apiKey", "apikey", "api_key"),
    "sslContext": ("sslContext", "ssl_context", "sslcontext"),
    "caCertPath": ("caCertPath", "ca_cert_path", "cacertpath"),
}

KeyPath = tuple[str, ...]


def is_disabled(env: Mapping[str, str]) -> bool:
    """OPENLINEAGE_DISABLED as openlineage-python reads it: `true` in any case, spaces aside; nothing else."""
    value = env.get(DISABLED, "")
    if value.strip().lower() in ("1", "yes", "on"):
        log.warning("%s=%s is not `true`: OpenLineage clients, and the sink, stay enabled", DISABLED, value)
    return value.strip().lower() == "true"


def find_config_file(env: Mapping[str, str], cwd: Path, home: Path) -> Path | None:
    named = env.get("OPENLINEAGE_CONFIG")
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigError(f"OPENLINEAGE_CONFIG names {named!r}, which is not a readable file")
        return path
    for candidate in (cwd / "openlineage.yml", home / ".openlineage" / "openlineage.yml"):
        if candidate.is_file():
            return candidate
    return None


def read_transport_section(path: Path) -> dict[str, Any]:
    """The `transport` mapping of an openlineage.yml ({} without one)."""
    doc = read_yaml(str(path), "the OpenLineage config") or {}
    section = doc.get("transport") if isinstance(doc, dict) else None
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: `transport` must be a mapping")
    return section


def env_transport(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[KeyPath, str], dict[KeyPath, str]]:
    """The `transport` the OPENLINEAGE__ variables describe: (values, variable per path, raw text per path).

    An empty variable counts as not given (olstream's rule). The raw text is kept for values set by a
    variable of their own, so that a key such as `1e10` stays the string it was, not a float.
    """
    values: dict[str, Any] = {}
    names: dict[KeyPath, str] = {}
    raws: dict[KeyPath, str] = {}
    given = sorted(((k, v) for k, v in env.items() if k.startswith(ENV_PREFIX) and v), reverse=True)
    for var, raw in given:
        keys = tuple(k.lower() for k in var[len(ENV_PREFIX) :].split("__"))
        if keys[0] != "transport":
            continue
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        path = keys[1:]
        for done in [p for p in names if p[: len(path)] == path]:  # a shallower variable replaces them
            del names[done]
            raws.pop(done, None)
        names[path] = var
        raws[path] = raw
        if not path:
            if not isinstance(value, dict):
                raise ConfigError(f"{var} must be a JSON object (the whole transport section)")
            values = value
            continue
        node = values
        for depth, key in enumerate(path[:-1]):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                above = ENV_PREFIX + "__".join(("TRANSPORT", *path[: depth + 1])).upper()
                raise ConfigError(
                    f"{var} cannot be applied: {above} is already set to a value, not an object"
                )
            node = child
        node[path[-1]] = value
    return values, names, raws


def _under(table: Mapping[KeyPath, str], prefix: KeyPath) -> dict[KeyPath, str]:
    """The entries of `table` below `prefix`, relative to it; () for a variable that set an ancestor."""
    out = {k[len(prefix) :]: v for k, v in table.items() if k[: len(prefix)] == prefix}
    ancestors = [k for k in table if len(k) < len(prefix) and prefix[: len(k)] == k]
    if ancestors and () not in out:
        out[()] = table[max(ancestors, key=len)]
    return out


def _dig(doc: Any, path: KeyPath) -> tuple[Any, KeyPath]:
    """The value at `path` (a key in any of its spellings) and the keys as spelled; (None, ()) if absent."""
    node, spelled = doc, []
    for name in path:
        if not isinstance(node, Mapping):
            return None, ()
        for spelling in SPELLINGS.get(name, (name,)):
            if node.get(spelling) is not None:
                node = node[spelling]
                spelled.append(spelling)
                break
        else:
            return None, ()
    return node, tuple(spelled)


def as_text(value: Any, what: str, origin: str) -> str:
    """A string setting: a string, or a number as written (YAML `X-Num: 7`); anything else is an error."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ConfigError(f"{what} (from {origin}) must be a string, not {type(value).__name__}")


@dataclass(frozen=True)
class Section:
    """One transport's settings: the OPENLINEAGE__ variables over the file, value by value."""

    env: Mapping[str, Any] = field(default_factory=dict)
    file: Mapping[str, Any] = field(default_factory=dict)
    file_origin: str = ""
    names: Mapping[KeyPath, str] = field(default_factory=dict)  # path -> the variable that set it
    raws: Mapping[KeyPath, str] = field(default_factory=dict)  # path -> that variable's text

    def __bool__(self) -> bool:
        return bool(self.env or self.file)

    @property
    def origin(self) -> str:
        """Where the section as a whole comes from: the file, else the variables."""
        return self.file_origin if self.file else self._env_origin(())

    def _env_origin(self, spelled: KeyPath) -> str:
        for n in range(len(spelled), -1, -1):
            if spelled[:n] in self.names:
                return f"env {self.names[spelled[:n]]}"
        return "env OPENLINEAGE__TRANSPORT"

    def _lookup(self, path: KeyPath, layers: str = "env file") -> tuple[Any, str | None, str | None]:
        """(value, origin, the variable's own text for a value one variable set by itself) at `path`."""
        if "env" in layers:
            value, spelled = _dig(self.env, path)
            if value is not None:
                return value, self._env_origin(spelled), self.raws.get(spelled) if spelled else None
        if "file" in layers:
            value, _ = _dig(self.file, path)
            if value is not None:
                return value, self.file_origin, None
        return None, None, None

    def get(self, *path: str, layers: str = "env file") -> tuple[Any, str | None]:
        """The value at `path` and where it came from: the variables first, then the file."""
        value, origin, _ = self._lookup(path, layers)
        return value, origin

    def text(self, *path: str, layers: str = "env file") -> tuple[str | None, str | None]:
        """A string setting at `path`: a variable's text as written (`1e10` stays `1e10`)."""
        value, origin, raw = self._lookup(path, layers)
        if value is None:
            return None, None
        if raw is not None and not isinstance(value, (str, dict, list)):
            return raw, origin
        return as_text(value, "transport." + ".".join(path), str(origin)), origin

    @property
    def kind(self) -> tuple[str | None, str | None]:
        kind, origin = self.text("type")
        return kind, origin

    def headers(self) -> list[tuple[str, str, str]]:
        """`custom_headers` as (name, value, origin): the variables' over the file's, names in any case."""
        merged: dict[str, tuple[str, str, str]] = {}
        for layer in ("file", "env"):
            given, where = self.get("custom_headers", layers=layer)
            if given is None:
                continue
            if not isinstance(given, Mapping):
                raise ConfigError(
                    f"transport.custom_headers (from {where}) must be a mapping of names to values"
                )
            for name, value in given.items():
                if value is None:
                    continue
                spelled = ("custom_headers", str(name))
                at = self._env_origin(spelled) if layer == "env" else self.file_origin
                raw = self.raws.get(spelled) if layer == "env" else None
                text = raw if raw is not None and not isinstance(value, str) else value
                merged[str(name).lower()] = (str(name), as_text(text, f"custom header {name}", at), at)
        return list(merged.values())

    def members(self, env: Mapping[str, str]) -> dict[str, Section]:
        """A composite's `transports` (a list of named members or a map) by name, with `default_http`."""
        from_env = _members(self.get("transports", layers="env")[0], "the OPENLINEAGE__ variables")
        from_file = _members(self.get("transports", layers="file")[0], self.file_origin)
        layers: dict[str, tuple[dict[str, Any], dict[KeyPath, str], dict[KeyPath, str]]] = {}
        for name, doc in from_env.items():
            raws = {k: v for k, v in _under(self.raws, ("transports", name)).items() if k}
            layers[name] = (doc, _under(self.names, ("transports", name)), raws)
        alias = _default_http(env)
        if alias is not None and DEFAULT_MEMBER not in layers:
            layers[DEFAULT_MEMBER] = (alias[0], alias[1], {})
        order = [*from_file, *(n for n in layers if n not in from_file)]
        found = {}
        for name in order:
            env_doc, names, raws = layers.get(name, ({}, {}, {}))
            found[name] = Section(
                env=env_doc,
                file=from_file.get(name, {}),
                file_origin=self.file_origin,
                names=names,
                raws=raws,
            )
        return found


def _members(given: Any, origin: str) -> dict[str, dict[str, Any]]:
    """A composite's `transports` by name: a map's keys, or the `name` of each member of a list."""
    if given is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    if isinstance(given, Mapping):
        for name, doc in given.items():
            if doc:  # openlineage-python skips the empty members of a map
                out[_member_name(name, origin)] = _member_doc(doc, str(name), origin)
        return out
    if not isinstance(given, list):
        raise ConfigError(f"transport.transports (from {origin}) must be a list or a map of transports")
    for n, doc in enumerate(given):
        if not isinstance(doc, Mapping) or not doc.get("name"):
            raise ConfigError(
                f"member {n + 1} of the composite transport (from {origin}) has no name: the sink runs "
                "one member per receiver, by name (give it `name:`, or use the map form)"
            )
        name = _member_name(doc["name"], origin)
        if name in out:
            raise ConfigError(f"the composite transport (from {origin}) has two members named {name!r}")
        out[name] = _member_doc(doc, name, origin)
    return out


def _member_name(name: Any, origin: str) -> str:
    text = str(name)
    if not MEMBER_NAME.fullmatch(text):
        raise ConfigError(
            f"composite member name {text!r} (from {origin}) must be letters, digits, '.', '_' or '-' "
            "(it becomes part of a consumer group and a topic name)"
        )
    return text


def _member_doc(doc: Any, name: str, origin: str) -> dict[str, Any]:
    if not isinstance(doc, Mapping):
        raise ConfigError(f"composite member {name!r} (from {origin}) must be a mapping")
    return {k: v for k, v in doc.items() if k not in ("name", "priority")}


def _default_http(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[KeyPath, str]] | None:
    """OPENLINEAGE_URL (with OPENLINEAGE_ENDPOINT, OPENLINEAGE_API_KEY) as the member `default_http`.

    As openlineage-python's `_alias_env_vars`: not when a variable already configures that member.
    """
    url = env.get("OPENLINEAGE_URL")
    prefix = f"{ENV_PREFIX}TRANSPORT__TRANSPORTS__{DEFAULT_MEMBER.upper()}"
    if not url or any(k.startswith(prefix) for k in env):
        return None
    doc: dict[str, Any] = {"type": "http", "url": url}
    where: dict[KeyPath, str] = {("type",): "OPENLINEAGE_URL", ("url",): "OPENLINEAGE_URL"}
    if endpoint := env.get("OPENLINEAGE_ENDPOINT"):
        doc["endpoint"], where[("endpoint",)] = endpoint, "OPENLINEAGE_ENDPOINT"
    if key := env.get("OPENLINEAGE_API_KEY"):
        doc["auth"], where[("auth",)] = {"type": "api_key", "apiKey": key}, "OPENLINEAGE_API_KEY"
    return doc, where
