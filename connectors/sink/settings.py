"""Sink settings: flags win over the environment, the environment over `openlineage.yml`.

The destination comes from OpenLineage's own settings: OPENLINEAGE_URL, OPENLINEAGE_ENDPOINT,
OPENLINEAGE_API_KEY, OPENLINEAGE_CONFIG (names the YAML file; else `./openlineage.yml`, else
`~/.openlineage/openlineage.yml`), whose `transport` section is the one openlineage-python reads
(types http, file, console). Everything else is declared in `SINK_SETTINGS` and resolved by the
shared resolver (`olstream.shared.config`): flags > OLSTREAM_* > the --config file > defaults.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olstream.contract import topics
from olstream.shared.config import (
    BOOTSTRAP,
    LOG_FORMAT,
    LOG_LEVEL,
    METRICS_PORT,
    FileLayer,
    Setting,
    at_least,
    defaults,
    positive,
    read_yaml,
    redact_url,
    resolve,
)
from olstream.shared.errors import ConfigError
from olstream.shared.logs import REDACTED, hide_userinfo, register_secret, register_url_credentials
from olstream.shared.stopping import STOP_TIMEOUT

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "api/v1/lineage"
TRANSPORT_TYPES = ("http", "file", "console")


SINK_SETTINGS = (
    BOOTSTRAP,
    Setting("topic", topics.RUN_EVENTS, "topic of RunEvents to deliver", env="OLSTREAM_SINK_TOPIC"),
    Setting("group", "olstream-sink", "consumer group", env="OLSTREAM_SINK_GROUP"),
    Setting(
        "instance_id",
        None,
        "static group membership id: a restarted sink takes over at once",
        env="OLSTREAM_SINK_INSTANCE_ID",
    ),
    Setting("concurrency", 16, "requests in flight at most", parse=int, env="", check=at_least(1)),
    Setting(
        "batch_size", 0, "POST up to N events to {url}/batch (0: off)", parse=int, env="", check=at_least(0)
    ),
    Setting("connect_timeout", 5.0, "seconds to connect", parse=float, env="", check=positive),
    Setting(
        "timeout",
        15.0,
        "seconds per request (also openlineage.yml transport.timeout)",
        parse=float,
        env="",
        check=positive,
    ),
    Setting("max_backoff", 300.0, "longest backoff wait, s", parse=float, env=""),
    Setting(
        "max_buffered", 5000, "events held in memory before pausing", parse=int, env="", check=at_least(1)
    ),
    Setting("commit_interval", 1.0, "seconds between offset commits", parse=float, env="", check=at_least(0)),
    Setting("dlq_topic", topics.SINK_DLQ, "dead-letter topic", env="OLSTREAM_SINK_DLQ_TOPIC"),
    Setting("dry_run", False, "print what would be sent; send nothing", switch=True, env=""),
    Setting("until_idle", False, "exit 0 once all is delivered", switch=True, env=""),
    STOP_TIMEOUT,
    METRICS_PORT,
    LOG_FORMAT,
    LOG_LEVEL,
)
"""The sink's own settings. Where events go (the transport) comes from OpenLineage's settings:
the destination flags, OPENLINEAGE_* variables and openlineage.yml (`build_settings`)."""
_D = defaults(SINK_SETTINGS)


@dataclass(frozen=True)
class SinkSettings:
    """Everything `olstream sink` needs, built once in main()."""

    bootstrap: str = _D["bootstrap"]
    topic: str = _D["topic"]
    group: str = _D["group"]
    transport: str = "http"  # http | file | console
    url: str | None = None  # the full URL events are POSTed to (suffix rule applied)
    api_key: str | None = field(default=None, repr=False)
    file_path: str | None = None
    ca_file: str | None = None
    connect_timeout: float = _D["connect_timeout"]
    total_timeout: float = _D["timeout"]
    concurrency: int = _D["concurrency"]
    batch_size: int = _D["batch_size"]  # > 1: POST up to this many events to {url}/batch (the spec's)
    max_buffered: int = _D["max_buffered"]
    backoff_initial: float = 0.5
    backoff_max: float = _D["max_backoff"]
    commit_interval: float = _D["commit_interval"]
    dlq_topic: str = _D["dlq_topic"]
    dry_run: bool = _D["dry_run"]
    until_idle: bool = _D["until_idle"]
    stop_timeout: float = _D["stop_timeout"]
    metrics_port: int = _D["metrics_port"]
    instance_id: str | None = None
    log_format: str = _D["log_format"]
    log_level: str = _D["log_level"]
    sources: tuple[tuple[str, str], ...] = ()  # (setting, where it came from)

    def __repr__(self) -> str:
        """The settings as `describe` shows them: no API key, no user info of the URL."""
        shown = {k: v for k, v in self.describe().items() if k != "sources"}
        return f"SinkSettings({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    def describe(self) -> dict[str, Any]:
        """A printable view of the settings with the API key and the URL's user info redacted."""
        doc = dataclasses.asdict(self)
        doc["api_key"] = REDACTED if self.api_key else None
        doc["url"] = redact_url(self.url)
        doc["sources"] = dict(self.sources)
        return doc

    @property
    def destination(self) -> str:
        """Where events go, for log lines: the URL's user info is ***."""
        if self.transport == "http":
            return str(redact_url(self.url))
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
        shown = redact_url(hide_userinfo(base))
        raise ConfigError(f"OpenLineage URL must start with http:// or https://, got {shown!r}")
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
    doc = read_yaml(str(path), "the OpenLineage config") or {}
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
        register_url_credentials(str(raw_url))  # before anything can show it, in any form
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

    yml_timeout = yml_http.get("timeout")
    files = (FileLayer({"timeout": yml_timeout}, f"file {cfg_path}"),) if yml_timeout is not None else ()
    r = resolve("sink", SINK_SETTINGS, flags, env, files)
    sources.update({k: v for k, v in r.origins.items() if k not in sources})
    settings = SinkSettings(
        bootstrap=r["bootstrap"],
        topic=r["topic"],
        group=r["group"],
        transport=transport,
        url=url,
        api_key=str(api_key) if api_key else None,
        file_path=str(file_path) if file_path else None,
        ca_file=str(ca_file) if ca_file else None,
        connect_timeout=r["connect_timeout"],
        total_timeout=r["timeout"],
        concurrency=r["concurrency"],
        max_buffered=r["max_buffered"],
        batch_size=r["batch_size"],
        backoff_max=r["max_backoff"],
        commit_interval=r["commit_interval"],
        dlq_topic=r["dlq_topic"],
        dry_run=r["dry_run"],
        until_idle=r["until_idle"],
        stop_timeout=r["stop_timeout"],
        metrics_port=r["metrics_port"],
        instance_id=r["instance_id"],
        log_format=r["log_format"],
        log_level=r["log_level"],
        sources=tuple(sorted(sources.items())),
    )
    _check(settings)
    return settings


def _check(s: SinkSettings) -> None:
    """What no single setting's check can see (each setting's own bounds are in SINK_SETTINGS)."""
    if s.backoff_max < s.backoff_initial:
        raise ConfigError(f"--max-backoff must be at least {s.backoff_initial} s")
    if s.api_key and s.url and hide_userinfo(s.url) != s.url:
        raise ConfigError(
            "the OpenLineage URL carries credentials (sent as Basic auth) and an API key is given "
            "(sent as Bearer): give one of them"
        )
    if s.ca_file and not Path(s.ca_file).is_file():
        raise ConfigError(f"CA file {s.ca_file!r} does not exist")
