"""The local MirrorMaker 2's rendered mm2.properties, Java properties files and readiness (pure functions)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from olstream.devkit.mirror_config import (
    DEFAULT_MIRROR_VERSION,
    MAIN_CLASS,
    MM2_HEADER,
    MirrorSettings,
    Readiness,
    default_data_dir,
    jar_cache_dir,
    java_command,
    logging_config,
    mm2_properties,
    parse_properties,
    read_properties,
    render_properties,
    with_files,
)


def settings(**overrides: object) -> MirrorSettings:
    base: dict[str, object] = {
        "source_bootstrap": "a-1:9092",
        "target_bootstrap": "b-1:9092,b-2:9092",
        "data_dir": Path("/data/mm"),
    }
    return MirrorSettings(**{**base, **overrides})  # type: ignore[arg-type]


def test_the_default_version_is_the_newest_connect_mirror_on_maven_central() -> None:
    assert DEFAULT_MIRROR_VERSION == "4.3.1"


def test_one_flow_from_the_source_alias_to_the_target_alias() -> None:
    props = mm2_properties(settings())
    assert props["clusters"] == "A, B"
    assert props["A.bootstrap.servers"] == "a-1:9092"
    assert props["B.bootstrap.servers"] == "b-1:9092,b-2:9092"
    assert props["A->B.enabled"] == "true" and props["B->A.enabled"] == "false"
    assert props["A->B.topics"] == r"olstream\.eventlog"
    assert props["sync.group.offsets.enabled"] == "false"
    assert props["emit.heartbeats.enabled"] == "true"
    assert props["offset-syncs.topic.location"] == "target"


def test_the_topics_regex_keeps_its_backslash_in_the_file() -> None:
    """Properties.load reads `\\.` as `.`: the README's `olstream\\.eventlog` must be written `\\\\.`."""
    text = render_properties(mm2_properties(settings(topics=r"olstream\.eventlog|t\.a\d+")))
    assert "A->B.topics=olstream\\\\.eventlog|t\\\\.a\\\\d+\n" in text
    assert parse_properties(text)["A->B.topics"] == r"olstream\.eventlog|t\.a\d+"


def test_every_topic_it_creates_gets_the_replication_factor() -> None:
    props = mm2_properties(settings(replication_factor=3))
    for key in (
        "replication.factor",
        "checkpoints.topic.replication.factor",
        "heartbeats.topic.replication.factor",
        "offset-syncs.topic.replication.factor",
        "config.storage.replication.factor",
        "offset.storage.replication.factor",
        "status.storage.replication.factor",
    ):
        assert props[key] == "3", key


def test_worker_settings_are_prefixed_with_the_target_alias() -> None:
    """A top-level offset.flush.interval.ms does not reach the herder (measured); `<target>.` does."""
    props = mm2_properties(settings(target_alias="eu", offset_flush_interval_ms=250, refresh_interval=7))
    assert props["eu.offset.flush.interval.ms"] == "250"
    assert "offset.flush.interval.ms" not in props
    assert props["eu.plugin.discovery"] == "service_load"
    assert props["refresh.topics.interval.seconds"] == props["refresh.groups.interval.seconds"] == "7"


def test_the_replication_policies() -> None:
    default, identity = settings(), settings(replication_policy="identity")
    assert mm2_properties(default)["replication.policy.class"].endswith(".DefaultReplicationPolicy")
    assert mm2_properties(identity)["replication.policy.class"].endswith(".IdentityReplicationPolicy")
    assert default.remote_topic("olstream.eventlog") == "A.olstream.eventlog"
    assert identity.remote_topic("olstream.eventlog") == "olstream.eventlog"


def test_client_configs_are_prefixed_and_extra_properties_win() -> None:
    props = mm2_properties(
        settings(),
        source_client={"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"},
        target_client={"security.protocol": "SSL"},
        extra={"tasks.max": "4", "replication.factor": "2"},
    )
    assert props["A.security.protocol"] == "SASL_SSL" and props["A.sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["B.security.protocol"] == "SSL"
    assert props["tasks.max"] == "4" and props["replication.factor"] == "2"


def test_a_client_config_cannot_move_the_cluster() -> None:
    with pytest.raises(ValueError, match=r"bootstrap\.servers"):
        mm2_properties(settings(), source_client={"bootstrap.servers": "elsewhere:9092"})


def test_the_files_are_read_as_java_properties(tmp_path: Path) -> None:
    source = tmp_path / "source.properties"
    source.write_text(
        "# the source region\n"
        "security.protocol=SASL_SSL\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="mm2" password="s3cret";\n'
    )
    extra = tmp_path / "extra.properties"
    extra.write_text("tasks.max = 2\n")
    props = with_files(settings(source_config=source, properties=extra))
    assert props["A.sasl.jaas.config"].endswith('required username="mm2" password="s3cret";')
    assert props["tasks.max"] == "2"


def test_an_unreadable_file_names_itself(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--properties .*missing\.properties"):
        read_properties(tmp_path / "missing.properties", "--properties")


# What java.util.Properties.load read from this file (JDK 17), key for key.
TRICKY = (
    "# comment \\\nnot.continued=1\n  ! bang\na = b\nc:d\ne f\ng   =   h  \ncont = one \\\n    two \\\\\n"
    "three=\\u00e9\\tx\\q\nkey\\ with\\ space = v\nempty\nemptyeq=\neq==x\n lead.ws = \\  spaced\n"
    "odd=a\\\\\\\n  b\ntrail\\\ncrlf=1\r\nnext=2\rmac=3"
)
JAVA_READ = {
    "not.continued": "1",
    "a": "b",
    "c": "d",
    "e": "f",
    "g": "h  ",
    "cont": "one two \\",
    "three": "é\txq",
    "key with space": "v",
    "empty": "",
    "emptyeq": "",
    "eq": "=x",
    "lead.ws": "  spaced",
    "odd": "a\\b",
    "trailcrlf": "1",
    "next": "2",
    "mac": "3",
}


def test_the_parser_reads_what_java_reads() -> None:
    assert parse_properties(TRICKY) == JAVA_READ


def test_a_malformed_unicode_escape_names_the_line_not_the_value() -> None:
    with pytest.raises(ValueError, match=r"x\.properties line 2: malformed") as raised:
        parse_properties("a=1\npassword=se\\u12cret\n", "x.properties")
    assert "cret" not in str(raised.value)


def test_rendering_escapes_what_java_would_misread() -> None:
    """Checked once against JDK 17's Properties.load; the round trip below guards it since."""
    text = render_properties({"weird key=:x": " lead\ttab\nnl \U0001f600 é #!", "#k": "v"})
    assert "weird\\ key\\=\\:x=\\ lead\\ttab\\nnl \\uD83D\\uDE00 \\u00E9 #!\n" in text
    assert "\\#k=v\n" in text
    assert text.isascii()


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)


@given(st.dictionaries(_TEXT.filter(bool), _TEXT, max_size=8))
def test_render_then_parse_is_the_identity(props: dict[str, str]) -> None:
    assert parse_properties(render_properties(props, MM2_HEADER)) == props


def test_the_header_is_a_comment() -> None:
    text = render_properties({"a": "1"}, MM2_HEADER)
    assert all(line.startswith("#") for line in text.splitlines()[: len(MM2_HEADER)])
    assert parse_properties(text) == {"a": "1"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"source_alias": "A.B"}, "letters, digits"),
        ({"target_alias": ""}, "letters, digits"),
        ({"source_alias": "B"}, "both 'B'"),
        ({"replication_policy": "prefix"}, "one of default, identity"),
        ({"replication_policy": "identity", "target_bootstrap": "a-1:9092"}, "loop"),
    ],
)
def test_settings_that_cannot_work_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings(**overrides)


def test_the_driver_runs_only_the_herder_into_the_target(tmp_path: Path) -> None:
    s = settings(data_dir=tmp_path, target_alias="eu")
    cmd = java_command("/usr/bin/java", s, "/libs/*")
    assert cmd[0] == "/usr/bin/java" and "-Xmx512m" in cmd
    assert cmd[cmd.index("-cp") + 1] == "/libs/*"
    assert cmd[-4:] == [MAIN_CLASS, str(tmp_path / "config" / "mm2.properties"), "--clusters", "eu"]
    assert f"-Dlog4j2.configurationFile={tmp_path / 'config' / 'log4j2.properties'}" in cmd


def test_logging_writes_a_capped_mirror_log(tmp_path: Path) -> None:
    text = logging_config(settings(data_dir=tmp_path))
    assert f"appender.main.fileName = {tmp_path / 'logs' / 'mirror.log'}" in text
    assert "rootLogger.level = INFO" in text  # the readiness lines are INFO


def test_directories_follow_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_data_dir() == tmp_path / "state" / "olstream" / "mirror"
    assert jar_cache_dir("4.3.1") == tmp_path / "cache" / "olstream" / "mirror" / "4.3.1" / "libs"


# Lines of a real mirror.log (connect-mirror 4.3.1), trimmed.
SOURCE_STARTED = (
    "[2026-12-01 19:14:16,308] INFO Started MirrorSourceConnector with 3 topic-partitions. (o.a.k)"
)
HEARTBEAT_TASK = (
    "[2026-12-01 19:14:16,625] INFO WorkerSourceTask{id=MirrorHeartbeatConnector-0} "
    "Source task finished initialization and start (org.apache.kafka.connect.runtime.WorkerTask)"
)
SOURCE_TASK = HEARTBEAT_TASK.replace("MirrorHeartbeatConnector-0", "MirrorSourceConnector-0")


def _read(*lines: str) -> Readiness:
    r = Readiness()
    for line in lines:
        r = r.seen(line)
    return r


def test_ready_once_the_connector_the_heartbeats_and_the_first_task_run() -> None:
    assert not _read(SOURCE_STARTED, HEARTBEAT_TASK).ready
    assert not _read(HEARTBEAT_TASK, SOURCE_TASK).ready
    assert _read(SOURCE_TASK, HEARTBEAT_TASK, SOURCE_STARTED).ready  # in any order


def test_no_matching_topic_yet_needs_no_replication_task() -> None:
    assert _read(SOURCE_STARTED.replace(" 3 ", " 0 "), HEARTBEAT_TASK).ready


def test_the_last_warnings_and_errors_are_kept_for_the_failure_message() -> None:
    r = _read(*[f"[t] ERROR failure {i} (x)" for i in range(15)], "[t] WARN odd (x)", "[t] INFO fine (x)")
    assert len(r.problems) == 10 and r.problems[-2:] == ("[t] ERROR failure 14 (x)", "[t] WARN odd (x)")
