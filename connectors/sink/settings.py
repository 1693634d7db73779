"""Sink settings: flags win over the environment, the environment over `openlineage.yml`.

Environment: OPENLINEAGE_URL, OPENLINEAGE_ENDPOINT, OPENLINEAGE_API_KEY, OPENLINEAGE_CONFIG (names
the YAML file; else `./openlineage.yml`, else `~/.openlineage/openlineage.yml`), OLSTREAM_BOOTSTRAP,
OLSTREAM_SINK_TOPIC, OLSTREAM_SINK_GROUP. The YAML file's `transport` section is the one
openlineage-python reads (types http, file, console).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from olstream.shared.errors import ConfigError
from olstream.shared.logs import REDACTED, register_secret

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "api/v1/lineage"
TRANSPORT_TYPES = ("http", "file", "console")


@dataclass(frozen=True)
class SinkSettings:
    """Everything `olstream sink` needs, built once in main()."""

    bootstrap: str = "127.0.0.1:9092"
    topic: str = "openlineage.events"
    group: str = "olstream-sink"
    transport: str = "http"  # http | file | console
    url: str | None = None  # the full URL events are POSTed to (suffix rule applied)
    api_key: str | None = field(default=None, repr=False)
    file_path: str | None = None
    ca_file: str | None = None
    connect_timeout: float = 5.0
    total_timeout: float = 15.0
    concurrency: int = 16
    batch_size: int = 0  # > 1: POST up to this many events to {url}/batch (the spec's batch endpoint)
    max_buffered: int = 5000
    backoff_initial: float = 0.5
    backoff_max: float = 300.0
    commit_interval: float = 1.0
    dlq_topic: str = "openlineage.events.dlq"
    dry_run: bool = False
    until_idle: bool = False
    metrics_port: int = 0
    sources: tuple[tuple[str, str], ...] = ()  # (setting, where it came from)

    def describe(self) -> dict[str, Any]:
        """A printable view of the settings with the API key redacted."""
        doc = dataclasses.asdict(self)
        doc["api_key"] = REDACTED if self.api_key else None
        doc["sources"] = dict(self.sources)
        return doc

    @property
    def destination(self) -> str:
        if self.transport == "http":
            return str(self.url)
        if self.transport == "file":
            return f"file {self.file_path}"
        return "stdout"


def endpoint_url(url: str, endpoint: str | None) -> str:
    """Apply the suffix rule: append `/api/v1/lineage` unless the URL ends with it or an endpoint is given.

    An explicit endpoint is joined to the URL (unless the URL already ends with it); an empty
    endpoint means "post to the URL exactly as given".
    """
    base = url.strip()
    if not base.startswith(("http://", "https://")):
        raise ConfigError(f"OpenLineage URL must start with http:// or https://, got {base!r}")
    if endpoint is None:
        endpoint = DEFAULT_ENDPOINT
    suffix = endpoint.strip().strip("/")
    trimmed = base.rstrip("/")
    if not suffix or trimmed.endswith("/" + suffix):
        return trimmed if suffix else base
    return f"{trimmed}/{suffix}"


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
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read OpenLineage config {path}: {e}") from e
    section = doc.get("transport") if isinstance(doc, dict) else None
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: `transport` must be a mapping")
    kind = section.get("type", "http")
    if kind not in TRANSPORT_TYPES:
        raise ConfigError(f"{path}: transport type {kind!r} is not supported (use one of {TRANSPORT_TYPES})")
    return section


def _yml_api_key(section: Mapping[str, Any]) -> str | None:
    auth = section.get("auth") or {}
    if not isinstance(auth, dict):
        return None
    key = auth.get("apiKey") or auth.get("apikey") or auth.get("api_key")
    return str(key) if key else None


def _yml_ca_file(section: Mapping[str, Any]) -> str | None:
    ssl = section.get("sslContext") or section.get("ssl_context") or {}
    if isinstance(ssl, dict):
        ca = ssl.get("caCertPath") or ssl.get("ca_cert_path")
        return str(ca) if ca else None
    return None


def read_key_file(path: str) -> str:
    try:
        key = Path(path).read_text().strip()
    except OSError as e:
        raise ConfigError(f"cannot read the API key file {path!r}: {e.strerror}") from e
    if not key:
        raise ConfigError(f"the API key file {path!r} is empty")
    return key


def build_settings(
    flags: Mapping[str, Any], env: Mapping[str, str], cwd: Path, home: Path | None = None
) -> SinkSettings:
    """Merge flags (None = not given) over the environment over openlineage.yml over defaults."""
    cfg_path = find_config_file(env, cwd, home or Path.home())
    yml = read_transport_section(cfg_path) if cfg_path else {}
    sources: dict[str, str] = {}

    def pick(name: str, flag: Any, env_name: str | None, yml_value: Any) -> Any:
        if flag is not None:
            sources[name] = "flag"
            return flag
        if env_name and env.get(env_name):
            sources[name] = f"env {env_name}"
            return env[env_name]
        if yml_value is not None:
            sources[name] = f"file {cfg_path}"
            return yml_value
        return None

    # Which transport: a flag naming one wins, then OPENLINEAGE_URL (http), then the file.
    if flags.get("file"):
        transport, sources["transport"] = "file", "flag"
    elif flags.get("console"):
        transport, sources["transport"] = "console", "flag"
    elif flags.get("url"):
        transport, sources["transport"] = "http", "flag"
    elif env.get("OPENLINEAGE_URL"):
        transport, sources["transport"] = "http", "env OPENLINEAGE_URL"
    elif yml:
        transport, sources["transport"] = str(yml.get("type", "http")), f"file {cfg_path}"
    else:
        raise ConfigError(
            "no destination: give --url, --file or --console, set OPENLINEAGE_URL, "
            "or a `transport` section in openlineage.yml (OPENLINEAGE_CONFIG)"
        )

    url = api_key = file_path = ca_file = None
    yml_http = yml if yml.get("type", "http") == "http" else {}
    if transport == "http":
        raw_url = pick("url", flags.get("url"), "OPENLINEAGE_URL", yml_http.get("url"))
        if not raw_url:
            raise ConfigError("the http transport needs a URL (--url, OPENLINEAGE_URL or transport.url)")
        endpoint = pick("endpoint", flags.get("endpoint"), "OPENLINEAGE_ENDPOINT", yml_http.get("endpoint"))
        url = endpoint_url(str(raw_url), None if endpoint is None else str(endpoint))
        key_file = flags.get("api_key_file")
        if key_file:
            api_key, sources["api_key"] = read_key_file(str(key_file)), "flag --api-key-file"
        else:
            api_key = pick("api_key", None, "OPENLINEAGE_API_KEY", _yml_api_key(yml_http))
        ca_file = pick("ca_file", flags.get("ca_file"), None, _yml_ca_file(yml_http))
        if yml_http.get("verify") is False:
            log.warning("openlineage.yml sets verify: false; olstream always verifies TLS (use --ca-file)")
    elif transport == "file":
        yml_file = yml.get("log_file_path") if yml.get("type") == "file" else None
        file_path = pick("file_path", flags.get("file"), None, yml_file)
        if not file_path:
            raise ConfigError("the file transport needs a path (--file or transport.log_file_path)")
    register_secret(api_key)

    timeout = pick("total_timeout", flags.get("timeout"), None, yml_http.get("timeout"))
    defaults = SinkSettings()
    settings = SinkSettings(
        bootstrap=str(
            pick("bootstrap", flags.get("bootstrap"), "OLSTREAM_BOOTSTRAP", None) or defaults.bootstrap
        ),
        topic=str(pick("topic", flags.get("topic"), "OLSTREAM_SINK_TOPIC", None) or defaults.topic),
        group=str(pick("group", flags.get("group"), "OLSTREAM_SINK_GROUP", None) or defaults.group),
        transport=transport,
        url=url,
        api_key=str(api_key) if api_key else None,
        file_path=str(file_path) if file_path else None,
        ca_file=str(ca_file) if ca_file else None,
        connect_timeout=_number(flags.get("connect_timeout"), defaults.connect_timeout),
        total_timeout=_number(timeout, defaults.total_timeout),
        concurrency=int(_number(flags.get("concurrency"), defaults.concurrency)),
        max_buffered=int(_number(flags.get("max_buffered"), defaults.max_buffered)),
        batch_size=int(_number(flags.get("batch_size"), defaults.batch_size)),
        backoff_max=_number(flags.get("max_backoff"), defaults.backoff_max),
        commit_interval=_number(flags.get("commit_interval"), defaults.commit_interval),
        dlq_topic=str(flags.get("dlq_topic") or defaults.dlq_topic),
        dry_run=bool(flags.get("dry_run")),
        until_idle=bool(flags.get("until_idle")),
        metrics_port=int(flags.get("metrics_port") or 0),
        sources=tuple(sorted(sources.items())),
    )
    _check(settings)
    return settings


def _number(value: Any, default: float) -> float:
    if value is None:
        return default
    try:
        return float(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"expected a number, got {value!r}") from e


def _check(s: SinkSettings) -> None:
    if s.connect_timeout <= 0 or s.total_timeout <= 0:
        raise ConfigError("timeouts must be positive")
    if s.concurrency < 1 or s.max_buffered < 1:
        raise ConfigError("--concurrency and --max-buffered must be at least 1")
    if s.backoff_max < s.backoff_initial:
        raise ConfigError(f"--max-backoff must be at least {s.backoff_initial} s")
    if s.ca_file and not Path(s.ca_file).is_file():
        raise ConfigError(f"CA file {s.ca_file!r} does not exist")
