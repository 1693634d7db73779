"""Sink settings: flags win over the environment, the environment over `openlineage.yml`.

The destination comes from OpenLineage's own settings (`destination`, `openlineage_config`):
OPENLINEAGE_URL, OPENLINEAGE_ENDPOINT, OPENLINEAGE_API_KEY, the nested OPENLINEAGE__TRANSPORT__*
variables, OPENLINEAGE_DISABLED, and OPENLINEAGE_CONFIG (names the YAML file; else
`./openlineage.yml`, else `~/.openlineage/openlineage.yml`), whose `transport` section is the one
openlineage-python reads (types http, file, console, composite). Everything else is declared in
`SINK_SETTINGS` and resolved by the shared resolver (`olstream.shared.config`): flags > OLSTREAM_*
> the --config file > defaults.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olstream.connectors.sink.destination import DEFAULT_ENDPOINT as DEFAULT_ENDPOINT
from olstream.connectors.sink.destination import Choice, resolve_destination, top_section
from olstream.connectors.sink.destination import endpoint_url as endpoint_url
from olstream.connectors.sink.destination import read_key_file as read_key_file
from olstream.connectors.sink.openlineage_config import COMPOSITE, DISABLED, Section, is_disabled
from olstream.connectors.sink.openlineage_config import TRANSPORT_TYPES as TRANSPORT_TYPES
from olstream.contract import topics
from olstream.shared.config import (
    BOOTSTRAP,
    LOG_FORMAT,
    LOG_LEVEL,
    METRICS_HOST,
    METRICS_PORT,
    Old,
    Resolved,
    Setting,
    at_least,
    defaults,
    positive,
    redact_url,
    resolve,
)
from olstream.shared.errors import ConfigError
from olstream.shared.kafka_clients import KafkaConnection
from olstream.shared.kafka_settings import (
    KAFKA_CLIENT_SETTINGS,
    TOPIC_SETTINGS,
    Replication,
    connection_of,
    replication_of,
)
from olstream.shared.logs import REDACTED, hide_userinfo
from olstream.shared.pipeline_names import EVENTS_TOPIC_ENV, SINK_DLQ_TOPIC_ENV
from olstream.shared.stopping import STOP_TIMEOUT

log = logging.getLogger(__name__)


TIMEOUT = Setting(
    "http_timeout",
    15.0,
    "seconds per HTTP request (also OPENLINEAGE__TRANSPORT__TIMEOUT, openlineage.yml transport.timeout)",
    parse=float,
    env="",
    check=positive,
    old=Old(flag="--timeout", key="timeout"),
)
SINK_SETTINGS = (
    BOOTSTRAP,
    *KAFKA_CLIENT_SETTINGS,
    *TOPIC_SETTINGS,
    Setting(
        "topic",
        topics.RUN_EVENTS,
        "topic of RunEvents to deliver",
        env=EVENTS_TOPIC_ENV,
        old=Old(env="OLSTREAM_SINK_TOPIC"),
    ),
    Setting("group", "olstream-sink", "consumer group", env="OLSTREAM_SINK_GROUP"),
    Setting(
        "transport_name",
        None,
        "run this member of a composite transport (openlineage.yml); its group and DLQ topic get "
        "the suffix .NAME unless --group / --dlq-topic are given",
        env="OLSTREAM_SINK_TRANSPORT",
        flag="--transport",
    ),
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
    TIMEOUT,
    Setting("max_backoff", 300.0, "longest backoff wait, s", parse=float, env=""),
    Setting(
        "retry_timeout",
        900.0,
        "dead-letter an event (retries_exhausted) that kept failing this long while the receiver "
        "accepted others, s (0: retry forever)",
        parse=float,
        env="OLSTREAM_SINK_RETRY_TIMEOUT",
        check=at_least(0),
    ),
    Setting(
        "max_buffered", 5000, "events held in memory before pausing", parse=int, env="", check=at_least(1)
    ),
    Setting("commit_interval", 1.0, "seconds between offset commits", parse=float, env="", check=at_least(0)),
    Setting("dlq_topic", topics.SINK_DLQ, "dead-letter topic", env=SINK_DLQ_TOPIC_ENV),
    Setting("dry_run", False, "print what would be sent; send nothing", switch=True, env=""),
    Setting("until_idle", False, "exit 0 once all is delivered", switch=True, env=""),
    STOP_TIMEOUT,
    METRICS_PORT,
    METRICS_HOST,
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
    transport_name: str | None = None  # the member of a composite transport this sink runs
    url: str | None = None  # the full URL events are POSTed to (suffix rule applied)
    api_key: str | None = field(default=None, repr=False)
    file_path: str | None = None
    ca_file: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # custom headers, every request
    compression: str | None = None  # gzip: request bodies gzipped, Content-Encoding: gzip
    disabled: bool = False  # OPENLINEAGE_DISABLED=true: deliver nothing, commit nothing
    connect_timeout: float = _D["connect_timeout"]
    total_timeout: float = _D["http_timeout"]
    concurrency: int = _D["concurrency"]
    batch_size: int = _D["batch_size"]  # > 1: POST up to this many events to {url}/batch (the spec's)
    max_buffered: int = _D["max_buffered"]
    backoff_initial: float = 0.5
    backoff_max: float = _D["max_backoff"]
    retry_timeout: float = _D["retry_timeout"]
    commit_interval: float = _D["commit_interval"]
    dlq_topic: str = _D["dlq_topic"]
    dry_run: bool = _D["dry_run"]
    until_idle: bool = _D["until_idle"]
    stop_timeout: float = _D["stop_timeout"]
    metrics_port: int = _D["metrics_port"]
    metrics_host: str = _D["metrics_host"]
    instance_id: str | None = None
    log_format: str = _D["log_format"]
    log_level: str = _D["log_level"]
    sources: tuple[tuple[str, str], ...] = ()  # (setting, where it came from)
    kafka: KafkaConnection | None = field(default=None, repr=False)  # None: PLAINTEXT to `bootstrap`
    replication: Replication = field(default_factory=Replication)  # of the DLQ topic it creates

    @property
    def connection(self) -> KafkaConnection:
        return self.kafka or KafkaConnection(self.bootstrap)

    def __repr__(self) -> str:
        """The settings as `describe` shows them: no API key, no header value, no user info of the URL."""
        shown = {k: v for k, v in self.describe().items() if k != "sources"}
        return f"SinkSettings({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    def describe(self) -> dict[str, Any]:
        """A printable view of the settings: the API key, header values and the URL's user info redacted."""
        doc = dataclasses.asdict(self)
        doc["api_key"] = REDACTED if self.api_key else None
        doc["headers"] = {name: REDACTED for name, _ in self.headers}
        doc["url"] = redact_url(self.url)
        doc["sources"] = dict(self.sources)
        doc["kafka"] = self.connection.describe()
        return doc

    @property
    def destination(self) -> str:
        """Where events go, for log lines: the URL's user info is ***."""
        where = "stdout"
        if self.transport == "http":
            where = str(redact_url(self.url))
        elif self.transport == "file":
            where = f"file {self.file_path}"
        return f"{where} (transport {self.transport_name})" if self.transport_name else where


def build_settings(
    flags: Mapping[str, Any], env: Mapping[str, str], cwd: Path, home: Path | None = None
) -> SinkSettings:
    """Merge flags (None = not given) over the environment over openlineage.yml over defaults."""
    r = resolve("sink", SINK_SETTINGS, flags, env)
    top = top_section(env, cwd, home or Path.home())
    dest = resolve_destination(choose(flags, env, top, r["transport_name"]), flags, env)
    if dest.timeout is not None:
        r = _transport_timeout(r, *dest.timeout)
    sources = dict(dest.sources)
    if name := dest.transport_name:  # a composite's member: its own group and DLQ, unless flags name them
        for key in ("group", "dlq_topic"):
            if r.origins[key] != "flag":
                r = r.with_value(key, f"{r[key]}.{name}", f"{r.origins[key]} + .{name} (--transport)")
        if r["transport_name"] is None:
            sources["transport_name"] = f"the only member ({dest.sources['transport']})"
    disabled = is_disabled(env)
    if disabled:
        sources["disabled"] = f"env {DISABLED}"
    sources.update({k: v for k, v in r.origins.items() if k not in sources})
    settings = SinkSettings(
        bootstrap=r["bootstrap"],
        topic=r["topic"],
        group=r["group"],
        transport=dest.transport,
        transport_name=dest.transport_name,
        url=dest.url,
        api_key=dest.api_key,
        file_path=dest.file_path,
        ca_file=dest.ca_file,
        headers=dest.headers,
        compression=dest.compression,
        disabled=disabled,
        connect_timeout=r["connect_timeout"],
        total_timeout=r["http_timeout"],
        concurrency=r["concurrency"],
        max_buffered=r["max_buffered"],
        batch_size=r["batch_size"],
        backoff_max=r["max_backoff"],
        retry_timeout=r["retry_timeout"],
        commit_interval=r["commit_interval"],
        dlq_topic=r["dlq_topic"],
        dry_run=r["dry_run"],
        until_idle=r["until_idle"],
        stop_timeout=r["stop_timeout"],
        metrics_port=r["metrics_port"],
        metrics_host=r["metrics_host"],
        instance_id=r["instance_id"],
        log_format=r["log_format"],
        log_level=r["log_level"],
        sources=tuple(sorted(sources.items())),
        kafka=connection_of(r),
        replication=replication_of(r),
    )
    _check(settings)
    return settings


def choose(flags: Mapping[str, Any], env: Mapping[str, str], top: Section, member: str | None) -> Choice:
    """Which transport: a destination flag, else the variables' type, else OPENLINEAGE_URL, else the file's.

    A composite (openlineage.yml or the variables) runs one member: the one `member` names
    (`--transport`), or its only one.
    """
    kind, origin = top.kind
    flag = next((name for name in ("file", "console", "url") if flags.get(name)), None)
    if flag is not None:
        if member:
            raise ConfigError(
                f"--transport {member} picks a member of a composite transport, but --{flag} names the "
                "destination itself: give one of them"
            )
        chosen = "http" if flag == "url" else flag
        return Choice(chosen, "flag", top if (kind or "http") == chosen else Section())
    env_kind, _ = top.text("type", layers="env")
    file_kind, _ = top.text("type", layers="file")
    if env_kind is None and env.get("OPENLINEAGE_URL") and file_kind != COMPOSITE:
        same = top if (file_kind or "http") == "http" else Section()  # the section describes this transport
        return _plain(Choice("http", "env OPENLINEAGE_URL", same), member)
    if not top:
        raise ConfigError(
            "no destination: give --url, --file or --console, set OPENLINEAGE_URL or "
            "OPENLINEAGE__TRANSPORT__*, or a `transport` section in openlineage.yml (OPENLINEAGE_CONFIG)"
        )
    kind = kind or "http"
    origin = origin or top.origin
    if kind == COMPOSITE:
        if top.get("continue_on_success")[0] is False:
            log.warning(
                "the composite transport sets continue_on_success: false (stop at the first receiver that "
                "accepts); the sink runs each member on its own, and each member receives every event"
            )
        return _member(top.members(env), member, origin)
    if kind not in TRANSPORT_TYPES:
        raise ConfigError(
            f"transport type {kind!r} (from {origin}) is not supported (use one of {TRANSPORT_TYPES})"
        )
    return _plain(Choice(kind, origin, top), member)


def _plain(choice: Choice, member: str | None) -> Choice:
    if member:
        raise ConfigError(
            f"--transport {member} picks a member of a composite transport, but the transport is "
            f"{choice.kind} (from {choice.origin})"
        )
    return choice


def _member(members: Mapping[str, Section], name: str | None, origin: str) -> Choice:
    listed = ", ".join(members) or "none"
    if not members:
        raise ConfigError(f"the composite transport (from {origin}) has no members")
    if name is None:
        if len(members) > 1:
            commands = " and ".join(f"`olstream sink --transport {n}`" for n in members)
            raise ConfigError(
                f"the composite transport (from {origin}) has {len(members)} members ({listed}): run one "
                f"sink per receiver, {commands}; each gets its own consumer group and DLQ"
            )
        name = next(iter(members))
    if name not in members:
        raise ConfigError(
            f"--transport {name}: the composite transport (from {origin}) has no such member ({listed})"
        )
    section = members[name]
    kind, where = section.kind
    kind = kind or "http"
    if kind == COMPOSITE:
        raise ConfigError(
            f"composite member {name!r} (from {where}) is itself composite: members are {TRANSPORT_TYPES}"
        )
    if kind not in TRANSPORT_TYPES:
        raise ConfigError(
            f"composite member {name!r} has type {kind!r} (from {where}), which the sink does not support "
            f"(use one of {TRANSPORT_TYPES})"
        )
    return Choice(kind, f"{where or origin}, member {name}", section, member=name, flat=False)


def _transport_timeout(r: Resolved, value: Any, origin: str) -> Resolved:
    """The transport's `timeout`: its OPENLINEAGE__ variable wins over the --config file; the yml does not."""
    given = r.origins[TIMEOUT.key]
    if given == "flag" or (origin.startswith("file") and given != "default"):
        return r
    try:
        return r.with_value(TIMEOUT.key, TIMEOUT.convert(value), origin)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"invalid sink setting {TIMEOUT.key} {value!r} (from {origin}): {e}") from e


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
