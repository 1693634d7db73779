"""The one configuration resolver of every command: flags > environment > file > default.

Each setting is declared once, as a `Setting`: its key, its default, how a string becomes its
value, its environment variable and its flag. A command declares the tuple of settings it reads
(its own, plus shared ones such as `BOOTSTRAP` or `LOG_FORMAT`), adds their flags to its parser
with `add_flags`, and calls `resolve`, which returns a `Resolved` that also records where each
value came from. `docs/configuration.md` is generated from these declarations
(`python -m olstream.cli.reference`), so a default is written in exactly one place.

The file is YAML, named by `--config FILE` or `OLSTREAM_CONFIG`. Top-level keys apply to every
command; a section named after the command (`source:`, `worker:`, `sink:`, `simulate:`)
applies to it alone and wins over the top level:

    bootstrap: kafka-1:9092
    worker:
      job_names: flat

An invalid setting raises `ConfigError` naming the setting, the value and where it came from;
`olstream.cli.main` prints it as one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from olstream.shared.errors import ConfigError
from olstream.shared.logs import REDACTED, redact

Parse = Callable[[str], Any]
Check = Callable[[Any], "str | None"]


def redact_url(value: Any) -> Any:
    """A URL's password as ***: `postgresql://u:***@h/db`. Anything else as it is."""
    if not isinstance(value, str) or "://" not in value:
        return value
    try:
        parts = urlsplit(value)
        password = parts.password
    except ValueError:
        return value
    if not password:
        return value
    netloc = parts.netloc.replace(f":{password}@", f":{REDACTED}@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def parse_bool(text: str) -> bool:
    """`true/false`, `yes/no`, `on/off`, `1/0` (any case)."""
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def at_least(bound: float) -> Check:
    """A check: the value is >= bound."""
    return lambda v: None if v is None or v >= bound else f"must be at least {bound:g}"


def positive(v: Any) -> str | None:
    return None if v is None or v > 0 else "must be positive"


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting, declared once. `env=""` means no environment variable; `flag=""` no flag."""

    key: str
    default: Any
    help: str
    parse: Parse = str
    env: str | None = None  # None: OLSTREAM_<KEY>
    flag: str | None = None  # None: --<key with dashes>
    choices: tuple[str, ...] | None = None
    check: Check | None = None
    secret: bool = False
    switch: bool = False  # a flag without a value (store_true); env/file take true/false

    @property
    def env_name(self) -> str:
        return f"OLSTREAM_{self.key.upper()}" if self.env is None else self.env

    @property
    def flag_name(self) -> str:
        return "--" + self.key.replace("_", "-") if self.flag is None else self.flag

    def convert(self, raw: Any) -> Any:
        """A raw value (a string from the environment, anything from YAML or a flag) as its type."""
        if raw is None:
            return None
        if self.switch:
            value: Any = raw if isinstance(raw, bool) else parse_bool(str(raw))
        elif self.parse in (int, float):
            if isinstance(raw, bool):
                raise ValueError("expected a number")
            try:
                value = self.parse(raw)
            except (TypeError, ValueError):
                raise ValueError(
                    "expected an integer" if self.parse is int else "expected a number"
                ) from None
        else:
            value = self.parse(raw if isinstance(raw, str) or self.parse is not str else str(raw))
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{self.key.replace('_', ' ')} must be one of {', '.join(self.choices)}")
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise ValueError(problem)
        return value


# Settings every service reads, declared here once.
BOOTSTRAP = Setting("bootstrap", "127.0.0.1:9092", "Kafka bootstrap servers, HOST:PORT[,HOST:PORT]")
LOG_FORMAT = Setting("log_format", "text", "log lines as text or JSON", choices=("text", "json"))
LOG_LEVEL = Setting("log_level", "INFO", "log level", parse=str.upper)
METRICS_PORT = Setting(
    "metrics_port", 0, "serve Prometheus metrics on this port (0: off)", parse=int, check=at_least(0)
)
CONFIG_FILE = Setting("config", None, "YAML file of settings (top level: every command; section: one)")
COMMON = (BOOTSTRAP, LOG_FORMAT, LOG_LEVEL, METRICS_PORT)


@dataclass(frozen=True)
class Resolved:
    """The effective settings of one command, and where each value came from."""

    command: str
    values: Mapping[str, Any]
    origins: Mapping[str, str]  # key -> "flag" | "env OLSTREAM_X" | "file PATH" | "default"
    secrets: frozenset[str] = frozenset()

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def describe(self) -> dict[str, Any]:
        """Values with secrets redacted, then `sources`: where each came from."""
        doc = {k: (REDACTED if k in self.secrets and v else redact_url(v)) for k, v in self.values.items()}
        doc["sources"] = dict(self.origins)
        return doc

    def render(self) -> str:
        return json.dumps(self.describe(), indent=2, default=str)


@dataclass(frozen=True)
class FileLayer:
    """Values read from a file, with the name to show as their origin."""

    values: Mapping[str, Any] = field(default_factory=dict)
    origin: str = ""


def add_flags(parser: argparse.ArgumentParser | Any, settings: Iterable[Setting]) -> None:
    """One flag per setting (default None, so the resolver sees what was given), plus --config."""
    for s in (*settings, CONFIG_FILE):
        if not s.flag_name or s.flag == "":
            continue
        where = [f"env {s.env_name}"] if s.env_name else []
        if s.default is not None and not s.secret:
            where.append(f"default {s.default}")
        text = f"{s.help} [{'; '.join(where)}]" if where else s.help
        if s.switch:
            parser.add_argument(s.flag_name, dest=s.key, action="store_true", default=None, help=text)
        else:
            parser.add_argument(s.flag_name, dest=s.key, default=None, choices=s.choices, help=text)


def add_print_config(parser: argparse.ArgumentParser | Any) -> None:
    parser.add_argument(
        "--print-config", action="store_true", help="print the effective settings (secrets redacted) and exit"
    )


def read_file(path: str, command: str) -> FileLayer:
    """The settings a YAML file gives `command`: its top level, overridden by its section."""
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except OSError as e:
        raise ConfigError(f"cannot read the configuration file {path}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"the configuration file {path} is not YAML: {' '.join(str(e).split())}") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"the configuration file {path} must hold a mapping of settings")
    values = {_key(k): v for k, v in doc.items() if not isinstance(v, dict)}
    section = doc.get(command)
    if section is not None:
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: the `{command}` section must be a mapping")
        values.update({_key(k): v for k, v in section.items()})
    return FileLayer(values, f"file {path}")


def _key(name: Any) -> str:
    return str(name).replace("-", "_")


def resolve(
    command: str,
    settings: Sequence[Setting],
    flags: Mapping[str, Any],
    environ: Mapping[str, str],
    files: Sequence[FileLayer] = (),
) -> Resolved:
    """Each setting from its flag, else its environment variable, else the files, else its default.

    `flags` is `vars(args)` (None: not given). With no `files`, the file named by --config or
    OLSTREAM_CONFIG is read. Keys a file gives that no setting of the command declares are
    ignored, so one file can serve every command.
    """
    if not files:
        path = flags.get("config") or environ.get(CONFIG_FILE.env_name)
        files = (read_file(str(path), command),) if path else ()
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for s in settings:
        raw: Any = None
        origin = "default"
        if flags.get(s.key) is not None:
            raw, origin = flags[s.key], "flag"
        elif s.env_name and environ.get(s.env_name):
            raw, origin = environ[s.env_name], f"env {s.env_name}"
        else:
            for layer in files:
                if layer.values.get(s.key) is not None:
                    raw, origin = layer.values[s.key], layer.origin
                    break
        if raw is None:
            values[s.key], origins[s.key] = s.default, "default"
            continue
        try:
            values[s.key] = s.convert(raw)
        except (TypeError, ValueError) as e:
            shown = REDACTED if s.secret else repr(raw)
            where = f"flag {s.flag_name}" if origin == "flag" else origin
            raise ConfigError(f"invalid {command} setting {s.key} {shown} (from {where}): {e}") from e
        origins[s.key] = origin
    return Resolved(command, values, origins, frozenset(s.key for s in settings if s.secret))


def defaults(settings: Iterable[Setting]) -> dict[str, Any]:
    """key -> declared default, for dataclasses whose field defaults must not be written twice."""
    return {s.key: s.default for s in settings}


def reference_rows(settings: Iterable[Setting]) -> list[tuple[str, str, str, str]]:
    """(flag, environment variable, default, meaning) per setting, for docs/configuration.md."""
    rows = []
    for s in settings:
        if s.default is None:
            default = "(none)"
        elif s.switch:
            default = "true" if s.default else "false"
        else:
            default = str(s.default) if s.default != "" else "(empty)"
        meaning = s.help + (f" (one of: {', '.join(s.choices)})" if s.choices else "")
        rows.append((s.flag_name or "-", s.env_name or "-", default, meaning))
    return rows


def field_default(cls: type, name: str) -> Any:
    """The default a dataclass declares for one of its fields (so a setting can take it, not repeat it)."""
    for f in fields(cls):
        if f.name == name:
            return f.default
    raise AttributeError(f"{cls.__name__} has no field {name}")


def print_config(resolved: Resolved) -> None:
    """`--print-config`: the effective settings as JSON on stdout, secrets redacted."""
    sys.stdout.write(redact(resolved.render()) + "\n")
