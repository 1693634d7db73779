"""The log4j2 configuration of the local JVMs (a Kafka 4.x broker, MirrorMaker 2): one size-capped,
rolled log file, so a long-running local process never fills the disk."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def log4j2_properties(log_file: Path, levels: Mapping[str, tuple[str, str]] | None = None) -> str:
    """log4j2.properties text: INFO and up into `log_file` (20 MB, 3 older files kept); `levels`
    names more loggers, by id: (logger name, level)."""
    lines = [
        "status = warn",
        "appender.main.type = RollingFile",
        "appender.main.name = MAIN",
        f"appender.main.fileName = {log_file}",
        f"appender.main.filePattern = {log_file}.%i",
        "appender.main.layout.type = PatternLayout",
        "appender.main.layout.pattern = [%d] %p %m (%c)%n",
        "appender.main.policies.type = Policies",
        "appender.main.policies.size.type = SizeBasedTriggeringPolicy",
        "appender.main.policies.size.size = 20MB",
        "appender.main.strategy.type = DefaultRolloverStrategy",
        "appender.main.strategy.max = 3",
        "rootLogger.level = INFO",
        "rootLogger.appenderRef.main.ref = MAIN",
    ]
    for key, (name, level) in (levels or {}).items():
        lines += [f"logger.{key}.name = {name}", f"logger.{key}.level = {level}"]
    return "\n".join([*lines, ""])
