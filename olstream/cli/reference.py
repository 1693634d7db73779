"""Every command's settings, and the reference pages generated from the code.

`python -m olstream.cli.reference > docs/configuration.md` rewrites the settings page, and
`--exit-codes` prints the exit-code block of docs/operations.md; unit tests fail when a page
and the code differ, so each default and each exit code is written once, in code.
"""

from __future__ import annotations

import sys

from olstream.connectors.sink.settings import SINK_SETTINGS
from olstream.connectors.source.settings import SOURCE_SETTINGS
from olstream.devkit import mirror_settings
from olstream.devkit import settings as devkit
from olstream.eventlog.settings import SIMULATE_SETTINGS
from olstream.operations import settings as operations
from olstream.operations.replay_settings import REPLAY_SETTINGS, SINK_FLAGS
from olstream.shared.config import CONFIG_FILE, Setting, reference_rows
from olstream.shared.errors import EXIT_MEANINGS, ExitCode
from olstream.streams.settings import WORKER_SETTINGS

COMMAND_SETTINGS: dict[str, tuple[Setting, ...]] = {
    "source": SOURCE_SETTINGS,
    "worker": WORKER_SETTINGS,
    "sink": SINK_SETTINGS,
    "simulate": SIMULATE_SETTINGS,
    "replay": REPLAY_SETTINGS,
}
"""The command (and its section in the --config file) -> the settings it reads."""

INFRA_SETTINGS: dict[str, tuple[str, tuple[Setting, ...]]] = {
    "kafka up": ("kafka", devkit.KAFKA_UP),
    "kafka down": ("kafka", devkit.KAFKA_DOWN),
    "kafka status": ("kafka", devkit.KAFKA_STATUS),
    "mirror up": ("mirror", mirror_settings.MIRROR_UP),
    "mirror down": ("mirror", mirror_settings.MIRROR_DOWN),
    "mirror status": ("mirror", mirror_settings.MIRROR_STATUS),
    "postgres up": ("postgres", devkit.POSTGRES_UP),
    "postgres down": ("postgres", devkit.POSTGRES_DOWN),
    "postgres status": ("postgres", devkit.POSTGRES_STATUS),
    "marquez up": ("marquez", devkit.MARQUEZ_UP),
    "marquez down": ("marquez", devkit.MARQUEZ_DOWN),
    "marquez status": ("marquez", devkit.MARQUEZ_STATUS),
    "registry up": ("registry", devkit.REGISTRY_UP),
    "registry down": ("registry", devkit.REGISTRY_DOWN),
    "registry status": ("registry", devkit.REGISTRY_STATUS),
    "demo": ("demo", devkit.DEMO),
}
"""Local infrastructure and tools: the command -> (its section in the file, its settings)."""

OPERATIONS_SETTINGS: dict[str, tuple[str, tuple[Setting, ...]]] = {
    "status": ("status", operations.STATUS),
    "errors list": ("errors", operations.ERRORS_LIST),
    "explain": ("explain", operations.EXPLAIN),
}
"""Operating a running pipeline: the command -> (its section in the file, its settings)."""

_INTRO = """# Configuration

Generated from the declarations in code by `python -m olstream.cli.reference`; do not edit by
hand (a unit test compares this page with the code).

Every command resolves its settings the same way (`olstream/shared/config.py`):

1. a flag, when given;
2. else its environment variable, when set and not empty (an empty flag counts as not given);
3. else the configuration file, when it names the setting;
4. else the default below.

The file is YAML, named by `--config FILE` or `OLSTREAM_CONFIG`. Keys are the setting names
below (the flag without its dashes, `_` for `-`). Its top level holds only the settings every
command shares: `bootstrap`, `log_format` and `log_level`. Everything else goes in the section
of its command (`source:`, `worker:`, `sink:`, `simulate:`, `replay:`, `kafka:`, `mirror:`,
`postgres:`, `marquez:`, `demo:`, `status:`, `explain:`), which also wins over the top level. The
same name means
different things to different commands (`batch_size` is rows per read for the source and records
per batch for the worker), so any other top-level key is an error. A key of a section that its command does
not declare is ignored (`kafka:` serves `up`, `down` and `status`). One file can serve a whole
pipeline:

```yaml
bootstrap: kafka-1:9092,kafka-2:9092
log_format: json
source:
  log_url: postgresql://olstream@eventlog-db:5432/eventlog
worker:
  job_names: hierarchical
sink:
  concurrency: 32
```

`--print-config` prints the effective settings of a command as JSON and exits: the olstream version
(`olstream_version`, as `olstream --version` prints it), each value and, under `sources`, where it
came from (`flag`, `env NAME`, `file PATH` or `default`). Secrets
(the sink's API key, the user info of a URL: user and password) are printed as `***`.

An invalid setting ends the command with one line on stderr naming the setting, the value and
where it came from, and the exit code `CONFIG` ([operations.md](operations.md#exit-codes)):

```
$ OLSTREAM_WORKER_BATCH_SIZE=many olstream worker
olstream worker: invalid worker setting batch_size 'many' (from env OLSTREAM_WORKER_BATCH_SIZE): \
expected an integer
```

A flag without a value (`--until-idle`) is `true`/`false` in the file and the environment.
"""

_SINK_DESTINATION = """
Where the sink delivers comes from OpenLineage's own settings, so a receiver configured for
openlineage-python works as it is: `--url` / `OPENLINEAGE_URL` / `transport.url`, `--endpoint`
/ `OPENLINEAGE_ENDPOINT` / `transport.endpoint` (default `api/v1/lineage`), `--api-key-file` /
`OPENLINEAGE_API_KEY` / `transport.auth.apiKey`, `--ca-file` / `transport.sslContext.caCertPath`,
`--file` (or `transport.type: file` with `log_file_path`) and `--console` (`type: console`). The
YAML file is `OPENLINEAGE_CONFIG`, else `./openlineage.yml`, else `~/.openlineage/openlineage.yml`.
See [sink.md](sink.md).
"""

_REPLAY_DELIVERY = """
Where and how a replay delivers is the sink's: its destination (as above), and its delivery
settings (`--concurrency`, `--batch-size`, `--retry-timeout`, `--dlq-topic`, `--topic`, ...: the
flags of `olstream sink` but `--group`, `--dry-run`, `--until-idle`, `--instance-id` and the
metrics), resolved from section `sink:` of the file and the sink's variables. See
[operations.md](operations.md#replaying-the-lineage-topic-olstream-replay).
"""


def _table(settings: tuple[Setting, ...]) -> str:
    rows = ["\n| flag | environment | default | meaning |\n|---|---|---|---|\n"]
    for flag, env, default, meaning in reference_rows((*settings, CONFIG_FILE)):
        shown_env = f"`{env}`" if env != "-" else "-"
        rows.append(f"| `{flag}` | {shown_env} | `{default}` | {meaning} |\n")
    return "".join(rows)


_RENAMED = """
## Renamed in this release

The old names below still work for this release: each use logs one WARNING naming the new name
(never the value). When both are given, the new name wins and the warning says so. The scheme:
`OLSTREAM_KAFKA_*` is how every command reaches Kafka; the worker's app id and the topics between
the services have one variable each, read by every command that uses them (`OLSTREAM_APP_ID`,
`OLSTREAM_RECORDS_TOPIC`, `OLSTREAM_EVENTS_TOPIC`, `OLSTREAM_SINK_DLQ_TOPIC`); a service's own
settings are `OLSTREAM_SOURCE_*`, `OLSTREAM_WORKER_*`, `OLSTREAM_SINK_*`, `OLSTREAM_REPLAY_*`; the
local launchers' `OLSTREAM_LOCAL_<LAUNCHER>_*`; settings every service shares (`OLSTREAM_LOG_*`,
`OLSTREAM_METRICS_*`, ...) have no prefix. A flag names what it bounds: `--wait` a wait for the
broker, `--http-timeout` an HTTP request, `--start-timeout` / `--stop-timeout` a launcher's start
or stop.

| old | new | commands |
|---|---|---|
"""


def every_command() -> dict[str, tuple[Setting, ...]]:
    """Each command (and action) -> its settings: the services', the launchers' and the operations'."""
    return {
        **{"log simulate" if c == "simulate" else c: s for c, s in COMMAND_SETTINGS.items()},
        "replay": (*REPLAY_SETTINGS, *SINK_FLAGS),
        "errors show": operations.STATUS,
        "errors redrive": operations.ERRORS_REDRIVE,
        **{title: s for title, (_, s) in INFRA_SETTINGS.items()},
        **{title: s for title, (_, s) in OPERATIONS_SETTINGS.items()},
    }


def renames() -> dict[tuple[str, str], list[str]]:
    """(old name, new name) -> the commands that read it, for every renamed variable and flag."""
    found: dict[tuple[str, str], list[str]] = {}
    for command, settings in every_command().items():
        for s in settings:
            for old, new in ((s.old.env, s.env_name), (s.old.flag, s.flag_name)):
                if old and command not in found.setdefault((old, new), []):
                    found[(old, new)].append(command)
    return found


def _renamed_table() -> str:
    rows = sorted(renames().items(), key=lambda item: (item[0][0].startswith("-"), item[0]))
    return _RENAMED + "".join(f"| `{old}` | `{new}` | {', '.join(c)} |\n" for (old, new), c in rows)


def render() -> str:
    parts = [_INTRO, _renamed_table()]
    for command, settings in COMMAND_SETTINGS.items():
        title = "log simulate" if command == "simulate" else command
        parts.append(f"\n## {command}\n\n`olstream {title}`, section `{command}:` of the file.\n")
        if command == "sink":
            parts.append(_SINK_DESTINATION)
        if command == "replay":
            parts.append(_REPLAY_DELIVERY)
        parts.append(_table(settings))
    parts.append(
        "\n## Local infrastructure and tools\n\nThe same resolver; see [operations.md](operations.md).\n"
    )
    for title, (section, settings) in INFRA_SETTINGS.items():
        parts.append(f"\n### {title}\n\n`olstream {title}`, section `{section}:` of the file.\n")
        parts.append(_table(settings))
    parts.append("\n## Operating a pipeline\n\nThe same resolver; see [operations.md](operations.md).\n")
    for title, (section, settings) in OPERATIONS_SETTINGS.items():
        parts.append(f"\n### {title}\n\n`olstream {title}`, section `{section}:` of the file.\n")
        parts.append(_table(settings))
    return "".join(parts)


EXIT_CODES_BEGIN = "<!-- exit codes: generated by `python -m olstream.cli.reference --exit-codes` -->\n"
EXIT_CODES_END = "<!-- end of exit codes -->\n"


def render_exit_codes() -> str:
    """The block of docs/operations.md that lists `ExitCode`, between its two markers."""
    rows = "".join(f"| {int(code)} | `{code.name}` | {EXIT_MEANINGS[code]} |\n" for code in ExitCode)
    return f"{EXIT_CODES_BEGIN}| code | name | meaning |\n|---|---|---|\n{rows}{EXIT_CODES_END}"


if __name__ == "__main__":
    sys.stdout.write(render_exit_codes() if sys.argv[1:] == ["--exit-codes"] else render())
