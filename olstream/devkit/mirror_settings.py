"""Settings of `olstream mirror up|down|status`, resolved like every command's (section `mirror:`).

The defaults suit a local single-broker pair and the tests (replication factor 1, a 5 s topic
scan, a 1 s position commit); a production pair takes `--replication-factor 3` and longer
intervals (docs/multi-region.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from olstream.devkit.mirror_config import (
    DEFAULT_MIRROR_VERSION,
    DEFAULT_TOPICS,
    POLICIES,
    MirrorSettings,
    alias_problem,
    default_data_dir,
    regex_problem,
)
from olstream.devkit.settings import data_dir_of, local_env
from olstream.shared.config import LOG_FORMAT, Resolved, Setting, at_least, field_default, positive
from olstream.shared.errors import ConfigError


def _alias(v: Any) -> str | None:
    return None if v is None else alias_problem(v)


def _regex(v: Any) -> str | None:
    return None if v is None else regex_problem(v)


def _file(key: str, what: str) -> Setting:
    return Setting(key, None, what, **local_env("mirror", key))


MIRROR_DATA_DIR = Setting(
    "data_dir",
    None,
    "directory of the local MirrorMaker 2: config, logs, mirror.json [~/.local/state/olstream/mirror]",
    **local_env("mirror", "data_dir"),
)
MIRROR_UP = (
    MIRROR_DATA_DIR,
    Setting(
        "source_bootstrap",
        None,
        "bootstrap servers of the cluster to replicate from",
        required=True,
        **local_env("mirror", "source_bootstrap"),
    ),
    Setting(
        "target_bootstrap",
        None,
        "bootstrap servers of the cluster to replicate into",
        required=True,
        **local_env("mirror", "target_bootstrap"),
    ),
    Setting(
        "source_alias",
        field_default(MirrorSettings, "source_alias"),
        "alias of the source cluster",
        env="",
        check=_alias,
    ),
    Setting(
        "target_alias",
        field_default(MirrorSettings, "target_alias"),
        "alias of the target cluster",
        env="",
        check=_alias,
    ),
    Setting(
        "topics",
        DEFAULT_TOPICS,
        "regular expression (Java) of the source topics to replicate; written escaped into mm2.properties",
        **local_env("mirror", "topics"),
        check=_regex,
    ),
    Setting(
        "replication_factor",
        field_default(MirrorSettings, "replication_factor"),
        "replication factor of every topic MirrorMaker 2 creates on the target (mirrored and internal)",
        parse=int,
        env="",
        check=at_least(1),
    ),
    Setting(
        "refresh_interval",
        field_default(MirrorSettings, "refresh_interval"),
        "seconds between scans of the source for new topics and consumer groups",
        parse=int,
        env="",
        check=at_least(1),
    ),
    Setting(
        "offset_flush_interval_ms",
        field_default(MirrorSettings, "offset_flush_interval_ms"),
        "how often MirrorMaker 2 commits its position (ms); a restart after kill -9 repeats what follows",
        parse=int,
        env="",
        check=at_least(1),
    ),
    Setting(
        "replication_policy",
        field_default(MirrorSettings, "replication_policy"),
        "default: the copy of topic T is A.T (A: the source alias); identity: it keeps the name T",
        env="",
        choices=tuple(POLICIES),
    ),
    _file(
        "source_config",
        "Java properties file of the source clients' settings (security.protocol=...), "
        "each key written with the alias (A.security.protocol)",
    ),
    _file(
        "target_config",
        "Java properties file of the target clients' settings (security.protocol=...), "
        "each key written with the alias (B.security.protocol)",
    ),
    _file("properties", "Java properties file of more MirrorMaker 2 properties, written last (they win)"),
    Setting(
        "version",
        DEFAULT_MIRROR_VERSION,
        "connect-mirror release (jars from Maven Central)",
        **local_env("mirror", "version"),
    ),
    Setting(
        "start_timeout",
        field_default(MirrorSettings, "start_timeout"),
        "seconds to wait until MirrorMaker 2 replicates",
        parse=float,
        env="",
        check=positive,
    ),
    LOG_FORMAT,
)
MIRROR_DOWN = (
    MIRROR_DATA_DIR,
    Setting("stop_timeout", 30.0, "seconds before SIGKILL", parse=float, env="", check=positive),
    LOG_FORMAT,
)
MIRROR_STATUS = (MIRROR_DATA_DIR, LOG_FORMAT)


def mirror_data_dir(r: Resolved) -> Path:
    return data_dir_of(r, default_data_dir())


def _path(value: str | None) -> Path | None:
    return Path(value).expanduser().resolve() if value else None


def mirror_settings(r: Resolved) -> MirrorSettings:
    """The settings of `mirror up`; a ConfigError when a cluster is missing or the aliases clash."""
    for side in ("source", "target"):
        if not r[f"{side}_bootstrap"]:
            raise ConfigError(
                f"no {side} cluster: pass --{side}-bootstrap HOST:PORT "
                f"or set OLSTREAM_LOCAL_MIRROR_{side.upper()}_BOOTSTRAP"
            )
    try:
        return MirrorSettings(
            source_bootstrap=r["source_bootstrap"],
            target_bootstrap=r["target_bootstrap"],
            data_dir=mirror_data_dir(r),
            source_alias=r["source_alias"],
            target_alias=r["target_alias"],
            topics=r["topics"],
            replication_factor=r["replication_factor"],
            refresh_interval=r["refresh_interval"],
            offset_flush_interval_ms=r["offset_flush_interval_ms"],
            replication_policy=r["replication_policy"],
            version=r["version"],
            start_timeout=r["start_timeout"],
            source_config=_path(r["source_config"]),
            target_config=_path(r["target_config"]),
            properties=_path(r["properties"]),
        )
    except ValueError as e:
        raise ConfigError(f"invalid mirror settings: {e}") from e
