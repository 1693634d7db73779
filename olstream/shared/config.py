"""The one configuration resolver of every command: flags > environment > file > default.

Each setting is declared once, as a `Setting`: its key, its default, how a string becomes its
value, its environment variable and its flag. A command declares the tuple of settings it reads
(its own, plus shared ones such as `BOOTSTRAP` or `LOG_FORMAT`), adds their flags to its parser
with `add_flags`, and calls `resolve`, which returns a `Resolved` that also records where each
value came from. `docs/configuration.md` is generated from these declarations
(`python -m olstream.cli.reference`), so a default is written in exactly one place.

The file is YAML, named by `--config FILE` or `OLSTREAM_CONFIG`. Its top level holds only the
settings every command shares (`bootstrap`, `log_format`, `log_level`); everything else goes in
the section of the command it is for (`FILE_SECTIONS`), which also wins over the top level. The
same name means different things to different commands (`batch_size`, `topic`, `data_dir`), so
a top-level key that is not shared is an error, not a guess:

    bootstrap: kafka-1:9092
    worker:
      job_names: flat

An empty value (a flag given as "", an empty variable) counts as not given. An invalid setting
raises `ConfigError` naming the setting, the value and where it came from; `olstream.cli.main`
prints it as one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import yaml

from olstream.shared import deprecated
from olstream.shared.errors import ConfigError
from olstream.shared.logs import REDACTED, hide_userinfo, redact
from olstream.shared.version import package_version

Parse = Callable[[str], Any]
Check = Callable[[Any], "str | None"]

SECRET_QUERY_KEYS = frozenset(
    {"password", "pass", "pwd", "secret", "token", "api_key", "apikey", "sslpassword"}
)


def redact_url(value: Any) -> Any:
    """A URL with its user info and secret query values as ***. Anything else as it is.

    The whole user info counts as a credential (a token is often the user name):
    `https://TOKEN@host` and `http://user:pw@[::1]:80/p` become `https://***@host` and
    `http://***@[::1]:80/p`, percent-encoded or not; a URL that does not parse still loses it.
    """
    if not isinstance(value, str) or "://" not in value:
        return value
    hidden = hide_userinfo(value)
    try:
        parts = urlsplit(hidden)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return hidden
    if any(k.lower() in SECRET_QUERY_KEYS for k, _ in query):
        shown = [(k, REDACTED if k.lower() in SECRET_QUERY_KEYS else v) for k, v in query]
        return urlunsplit(parts._replace(query=urlencode(shown, safe="*")))
    return hidden


def parse_bool(text: str) -> bool:
    """`true/false`, `yes/no`, `on/off`, `1/0` (any case)."""
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _number(kind: Parse, raw: Any) -> int | float:
    """An int or a finite float from a string or a YAML number (3.7 is not an integer)."""
    expected = "expected an integer" if kind is int else "expected a finite number"
    try:
        if kind is int and isinstance(raw, float):
            if not raw.is_integer():
                raise ValueError
            return int(raw)
        value: int | float = int(raw) if kind is int else float(raw)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(expected) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(expected)
    return value


def at_least(bound: float) -> Check:
    """A check: the value is >= bound."""
    return lambda v: None if v is None or v >= bound else f"must be at least {bound:g}"


def positive(v: Any) -> str | None:
    return None if v is None or v > 0 else "must be positive"


def port_number(v: Any) -> str | None:
    return None if v is None or 0 <= v <= 65535 else "must be a port number, 0..65535"


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level_name(v: Any) -> str | None:
    return None if v in LOG_LEVELS else f"must be one of {', '.join(LOG_LEVELS)}"


@dataclass(frozen=True, slots=True)
class Old:
    """A setting's names before this release, still read for one more; each use warns (`deprecated`)."""

    env: str = ""
    flag: str = ""
    key: str = ""  # in its section of the --config file


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting, declared once. `env=""` means no environment variable; `flag=""` no flag.

    A `help` ending in `[TEXT]` names what a default of None stands for (`[<topic>.errors]`); the
    help of its flag and docs/configuration.md show it as the default.
    """

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
    shared: bool = False  # every command has it: the file may give it at its top level
    old: Old = Old()  # the names it had before this release
    required: bool = False  # from its flag, variable or file: the command refuses to run without it

    @property
    def env_name(self) -> str:
        return f"OLSTREAM_{self.key.upper()}" if self.env is None else self.env

    @property
    def flag_name(self) -> str:
        return "--" + self.key.replace("_", "-") if self.flag is None else self.flag

    @property
    def meaning(self) -> str:
        """The help without the default it names."""
        return self.help[: self.help.rindex(" [")] if self._named_default() else self.help

    @property
    def default_text(self) -> str:
        """The default as the help and the docs show it: `(required)`, what None stands for, the value."""
        if self.required:
            return "(required)"
        if self.default is None:
            return self._named_default() or "(none)"
        if self.switch:
            return "true" if self.default else "false"
        if isinstance(self.default, tuple):  # a list setting: as it is written, comma-separated
            return ",".join(self.default)
        return str(self.default) if self.default != "" else "(empty)"

    def _named_default(self) -> str:
        if self.help.endswith("]") and " [" in self.help:
            return self.help[self.help.rindex(" [") + 2 : -1]
        return ""

    def convert(self, raw: Any) -> Any:
        """A raw value (a string from the environment, anything from YAML or a flag) as its type."""
        if raw is None:
            return None
        if self.switch:
            if not isinstance(raw, (bool, str)):
                raise ValueError("expected true or false")
            value: Any = raw if isinstance(raw, bool) else parse_bool(raw)
        elif isinstance(raw, (bool, list, dict)):  # YAML values of the wrong kind
            raise ValueError("expected a number" if self.parse in (int, float) else "expected a string")
        elif self.parse in (int, float):
            value = _number(self.parse, raw)
        else:
            value = self.parse(raw if isinstance(raw, str) else str(raw))
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{self.key.replace('_', ' ')} must be one of {', '.join(self.choices)}")
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise ValueError(problem)
        return value


# Settings every service reads, declared here once.
BOOTSTRAP = Setting(
    "bootstrap",
    "127.0.0.1:9092",
    "Kafka bootstrap servers, HOST:PORT[,HOST:PORT]",
    env="OLSTREAM_KAFKA_BOOTSTRAP",
    shared=True,
    old=Old(env="OLSTREAM_BOOTSTRAP"),
)
LOG_FORMAT = Setting("log_format", "text", "log lines as text or JSON", choices=("text", "json"), shared=True)
LOG_LEVEL = Setting(
    "log_level",
    "INFO",
    "log level (DEBUG, INFO, WARNING, ERROR)",
    parse=str.upper,
    check=log_level_name,
    shared=True,
)
METRICS_PORT = Setting(
    "metrics_port", 0, "serve Prometheus metrics on this port (0: off)", parse=int, check=port_number
)
METRICS_HOST = Setting(
    "metrics_host",
    "127.0.0.1",
    "address the metrics endpoint binds (0.0.0.0: every interface, as in the container image)",
)
CONFIG_FILE = Setting("config", None, "YAML file of settings (top level: shared ones; a section per command)")
SHARED = (BOOTSTRAP, LOG_FORMAT, LOG_LEVEL)
FILE_SECTIONS = (
    "source", "worker", "sink", "simulate", "kafka", "mirror", "postgres", "marquez", "demo", "status",
    "replay",
    "explain", "errors",
)  # fmt: skip
"""The sections of the configuration file: one per command (kafka, postgres, marquez: every action)."""


@dataclass(frozen=True)
class Resolved:
    """The effective settings of one command, and where each value came from."""

    command: str
    values: Mapping[str, Any]
    origins: Mapping[str, str]  # key -> "flag" | "env OLSTREAM_X" | "file PATH" | "default"
    secrets: frozenset[str] = frozenset()

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def with_value(self, key: str, value: Any, origin: str) -> Resolved:
        """A copy with one value filled in (a default derived from another setting)."""
        return Resolved(
            self.command, {**self.values, key: value}, {**self.origins, key: origin}, self.secrets
        )

    def describe(self) -> dict[str, Any]:
        """Values with secrets redacted, then `sources`: where each came from."""
        doc = {k: (REDACTED if k in self.secrets and v else redact_url(v)) for k, v in self.values.items()}
        doc["sources"] = dict(self.origins)
        return doc

    def render(self) -> str:
        return json.dumps(self.describe(), indent=2, default=str)


@dataclass(frozen=True)
class FileLayer:
    """Values read from a file, with the name to show as their origin.

    `values` are the command's own (its section); `shared` the top level's, which only settings
    every command shares (`Setting.shared`) take.
    """

    values: Mapping[str, Any] = field(default_factory=dict)
    origin: str = ""
    shared: Mapping[str, Any] = field(default_factory=dict)

    def get(self, s: Setting) -> Any:
        value = self.values.get(s.key)
        if s.old.key and (old := self.values.get(s.old.key)) is not None:
            deprecated.used(f"{self.origin}: key", s.old.key, s.key, both=value is not None)
            value = old if value is None else value
        if value is None and s.shared:
            value = self.shared.get(s.key)
        return value


def add_flags(parser: argparse.ArgumentParser | Any, settings: Iterable[Setting]) -> None:
    """One flag per setting (default None, so the resolver sees what was given), plus --config."""
    for s in (*settings, CONFIG_FILE):
        if not s.flag_name:
            continue
        shown = "" if s.secret and not s.required else s.default_text
        text = help_text(s.meaning, s.env_name, shown)
        for flag, dest, shown in ((s.flag_name, s.key, text), (s.old.flag, old_dest(s), argparse.SUPPRESS)):
            if not flag:
                continue
            if s.switch:
                parser.add_argument(flag, dest=dest, action="store_true", default=None, help=shown)
            else:
                parser.add_argument(flag, dest=dest, default=None, choices=s.choices, help=shown)


def help_text(what: str, env: str = "", default: str = "") -> str:
    """A flag's help as every flag shows it: `what [env NAME; default VALUE]` (`required` instead of a
    default that a required setting has not)."""
    bare = default[1:-1] if default.startswith("(") and default.endswith(")") else default  # (none): none
    shown = "required" if default == "(required)" else f"default {bare}" if default else ""
    where = "; ".join(part for part in (f"env {env}" if env else "", shown) if part)
    return f"{what} [{where}]" if where else what


def old_dest(s: Setting) -> str:
    """Where the parser keeps the value of a setting's old flag (the resolver warns when it is used)."""
    return f"{s.key}__old_flag"


def add_print_config(parser: argparse.ArgumentParser | Any) -> None:
    parser.add_argument(
        "--print-config", action="store_true", help="print the effective settings (secrets redacted) and exit"
    )


def read_yaml(path: str, what: str) -> Any:
    """A YAML file's document, or a ConfigError naming the file (missing, not UTF-8, not YAML)."""
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {path} is not UTF-8 text: {e.reason}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{what} {path} is not YAML: {' '.join(str(e).split())}") from e


def read_file(path: str, command: str) -> FileLayer:
    """The settings a YAML file gives `command`: its section, and the shared settings of its top level."""
    doc = read_yaml(path, "the configuration file") or {}
    if not isinstance(doc, dict):
        raise ConfigError(f"the configuration file {path} must hold a mapping of settings")
    shared_keys = {s.key for s in SHARED}
    shared: dict[str, Any] = {}
    for name, value in doc.items():
        key = _key(name)
        if key in FILE_SECTIONS or key == command:
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: `{key}` is the section of `olstream {key}` and must be a mapping")
        elif key in shared_keys:
            shared[key] = value
        else:
            raise ConfigError(
                f"{path}: the top-level key `{key}` is not a setting every command shares "
                f"({', '.join(sorted(shared_keys))}); put it in the section of its command "
                f"({', '.join(FILE_SECTIONS)})"
            )
    section = doc.get(command) or {}
    return FileLayer({_key(k): v for k, v in section.items()}, f"file {path}", shared)


def _key(name: Any) -> str:
    return str(name).replace("-", "_")


def resolve(
    command: str,
    settings: Sequence[Setting],
    flags: Mapping[str, Any],
    environ: Mapping[str, str],
    more_files: Sequence[FileLayer] = (),
) -> Resolved:
    """Each setting from its flag, else its environment variable, else the files, else its default.

    `flags` is `vars(args)` (None or "": not given). The file named by --config or
    OLSTREAM_CONFIG comes first, then `more_files` (the sink's openlineage.yml). A key of the
    command's section that no setting declares is ignored (a section such as `kafka:` serves
    several actions).
    """
    path = flags.get("config") or environ.get(CONFIG_FILE.env_name)
    files = ((read_file(str(path), command),) if path else ()) + tuple(more_files)
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for s in settings:
        raw: Any = None
        origin = "default"
        flag = deprecated.first_given(
            "flag", s.flag_name, flags.get(s.key), s.old.flag, flags.get(old_dest(s))
        )
        env = deprecated.first_given(
            "environment variable",
            s.env_name,
            environ.get(s.env_name or "-"),
            s.old.env,
            environ.get(s.old.env),
        )
        if flag is not None:
            raw, origin, spelled = flag[0], "flag", flag[1]
        elif env is not None:
            raw, origin = env[0], f"env {env[1]}"
        else:
            for layer in files:
                if (given := layer.get(s)) is not None:
                    raw, origin = given, layer.origin
                    break
        if raw is None:
            values[s.key], origins[s.key] = s.default, "default"
            continue
        try:
            values[s.key] = s.convert(raw)
        except (TypeError, ValueError) as e:
            shown = REDACTED if s.secret else repr(redact_url(raw))
            where = f"flag {spelled}" if origin == "flag" else origin
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
        meaning = s.meaning + (f" (one of: {', '.join(s.choices)})" if s.choices else "")
        rows.append((s.flag_name or "-", s.env_name or "-", s.default_text, meaning))
    return rows


def field_default(cls: type, name: str) -> Any:
    """The default a dataclass declares for one of its fields (so a setting can take it, not repeat it)."""
    for f in fields(cls):
        if f.name == name:
            return f.default
    raise AttributeError(f"{cls.__name__} has no field {name}")


def print_config(resolved: Resolved) -> None:
    """`--print-config`: the effective settings as JSON on stdout, secrets redacted."""
    print_settings(resolved.describe())


def print_settings(described: Mapping[str, Any]) -> None:
    """A command's described settings as JSON on stdout, secrets redacted, after `olstream_version`
    (the installed package's: which release read them)."""
    doc = {"olstream_version": package_version(), **described}
    sys.stdout.write(redact(json.dumps(doc, indent=2, default=str)) + "\n")
