"""The lines of a broker outage folded (olstream.shared.connection_logs): sequences of records in,
lines out, on a clock of the test's own; then through `setup_logging`, as text and as JSON."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from olstream.shared import connection_logs
from olstream.shared.connection_logs import ConnectionLogFold, Kind, sighting
from olstream.shared.logs import setup_logging

BROKER = "127.0.0.1:30202"
OTHER = "127.0.0.1:30204"

# what a worker logged, line by line, while its broker was away (issue 50), each shape once
AIOKAFKA_RETRIES = [
    (
        "aiokafka",
        logging.ERROR,
        "Unable connect to node with id 1: [Errno 111] Connect call failed ('127.0.0.1', 30202)",
    ),
    ("aiokafka", logging.ERROR, "Unable to update metadata from [1]"),
    (
        "aiokafka.consumer.fetcher",
        logging.ERROR,
        "Failed fetch messages from 1: NodeNotReadyError: Attempt to send a request to node which is not "
        "ready (node id 1).",
    ),
    (
        "aiokafka.consumer.group_coordinator",
        logging.ERROR,
        "Group Coordinator Request failed: NodeNotReadyError: Attempt to send a request to node which is "
        "not ready "
        "(node id 1).",
    ),
]
LIBRDKAFKA_RETRY = (
    "librdkafka",
    logging.ERROR,
    f"FAIL [rdkafka#consumer-16] [thrd:{BROKER}/bootstrap]: {BROKER}/bootstrap: "
    f"Connect to ipv4#{BROKER} failed: "
    "Connection refused (after 0ms in state CONNECT)",
)
SOURCE_ERROR_CALLBACK = (
    "olstream.connectors.source.publisher",
    logging.WARNING,
    f'Kafka: KafkaError{{code=_TRANSPORT,val=-195,str="{BROKER}/bootstrap: Connect to ipv4#{BROKER} failed: '
    'Connection refused (after 0ms in state CONNECT)"}',
)
ALL_DOWN = (
    "olstream.connectors.source.publisher",
    logging.WARNING,
    'Kafka: KafkaError{code=_ALL_BROKERS_DOWN,val=-187,str="1/1 brokers are down"}',
)
COMMITTED_TIMED_OUT = (
    "olstream.streams.runtime.agent",
    logging.WARNING,
    "could not read the group's committed offsets (evictions wait): KafkaError{code=_TIMED_OUT,val=-185,"
    'str="Failed to get committed offsets: Local: Timed out"}',
)
SESSION_EXPIRED = (
    "aiokafka.consumer.group_coordinator",
    logging.ERROR,
    "Heartbeat session expired - marking coordinator dead",
)
TIMER_OVERLAP = (
    "mode.timers",
    logging.WARNING,
    "Timer olstream.streams.runtime.agent.register_timers.<locals>.committed_timer is overlapping "
    "(interval=2.0 runtime=10.001227666999966)",
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Folding:
    """A `ConnectionLogFold` on the test's clock; `lines` is what a handler would write."""

    def __init__(self, quiet: float = 30.0, remind: float = 60.0) -> None:
        self.clock = Clock()
        self.lines: list[logging.LogRecord] = []
        self.fold = ConnectionLogFold(
            self.lines.append,
            quiet_seconds=quiet,
            remind_seconds=remind,
            clock=self.clock,
            enabled_for=lambda _level: True,
            watch=False,
        )

    def log(self, name: str, level: int, message: str) -> None:
        record = logging.LogRecord(name, level, __file__, 0, "%s", (message,), None)
        if self.fold.filter(record):
            self.lines.append(record)

    def wait(self, seconds: float) -> None:
        """`seconds` pass, the watcher looking every second."""
        for _ in range(int(seconds)):
            self.clock.now += 1.0
            self.fold.tick()

    def shown(self, at_least: int = logging.DEBUG) -> list[tuple[str, str, str]]:
        return [(r.levelname, r.name, r.getMessage()) for r in self.lines if r.levelno >= at_least]


def _outage(folding: Folding, lines: list[tuple[str, int, str]], seconds: int, per_second: int = 10) -> None:
    """`lines` over and over, `per_second` rounds a second, for `seconds` seconds."""
    for _ in range(seconds):
        for _ in range(per_second):
            for line in lines:
                folding.log(*line)
        folding.clock.now += 1.0
        folding.fold.tick()


def test_a_worker_s_retries_for_15_s_are_one_warning_per_client_library_and_one_info_each_when_back() -> None:
    folding = Folding()
    _outage(folding, [*AIOKAFKA_RETRIES, LIBRDKAFKA_RETRY], seconds=15)
    folding.wait(40)
    assert folding.shown(logging.WARNING) == [
        (
            "WARNING",
            "aiokafka",
            f"lost connection to broker {BROKER} (node 1): {AIOKAFKA_RETRIES[0][2]}; "
            "further connection errors "
            "are folded until it answers",
        ),
        (
            "WARNING",
            "librdkafka",
            f"lost connection to broker {BROKER}: {LIBRDKAFKA_RETRY[2]}; "
            "further connection errors are folded "
            "until it answers",
        ),
    ]
    back = [line for line in folding.shown() if line[0] == "INFO"]
    assert back == [
        (
            "INFO",
            "aiokafka",
            f"connection to broker {BROKER} (node 1) back after 14 s "
            "(599 connection errors folded, 0 related lines at INFO)",
        ),
        (
            "INFO",
            "librdkafka",
            f"connection to broker {BROKER} back after 14 s "
            "(149 connection errors folded, 0 related lines at INFO)",
        ),
    ]
    assert folding.fold.open_outages() == []


def test_the_source_s_error_callback_is_folded_and_a_disconnect_at_info_opens_no_outage() -> None:
    folding = Folding()
    disconnected = (
        "librdkafka",
        logging.INFO,
        f"FAIL [rdkafka#producer-1] [thrd:{BROKER}/1]: {BROKER}/1: Disconnected: connection closed by peer "
        "(after 4319ms in state UP)",
    )
    folding.log(*disconnected)
    assert folding.shown() == [("INFO", "librdkafka", disconnected[2])]  # an idle close: as it was
    folding.log(*SOURCE_ERROR_CALLBACK)
    _outage(
        folding, [LIBRDKAFKA_RETRY, SOURCE_ERROR_CALLBACK, ALL_DOWN, disconnected], seconds=10, per_second=2
    )
    loud = folding.shown(logging.WARNING)
    assert len(loud) == 1
    assert loud[0][:2] == ("WARNING", "olstream.connectors.source.publisher")
    assert loud[0][2].startswith(f"lost connection to broker {BROKER}: Kafka: KafkaError{{code=_TRANSPORT")
    folding.wait(31)
    assert folding.shown()[-1] == (
        "INFO",
        "librdkafka",
        f"connection to broker {BROKER} back after 9 s (80 connection errors folded, 0 related lines "
        "at INFO)",
    )


def test_lines_an_outage_explains_are_info_while_it_lasts_and_as_they_were_without_one() -> None:
    folding = Folding()
    for line in (COMMITTED_TIMED_OUT, SESSION_EXPIRED, TIMER_OVERLAP):
        folding.log(*line)
    assert [level for level, _name, _message in folding.shown()] == ["WARNING", "ERROR", "WARNING"]
    folding.lines.clear()
    folding.log(*AIOKAFKA_RETRIES[0])
    for line in (COMMITTED_TIMED_OUT, SESSION_EXPIRED, TIMER_OVERLAP):
        folding.log(*line)
    assert [(level, name) for level, name, _message in folding.shown()] == [
        ("WARNING", "aiokafka"),
        ("INFO", "olstream.streams.runtime.agent"),
        ("INFO", "aiokafka.consumer.group_coordinator"),
        ("INFO", "mode.timers"),
    ]
    folding.wait(31)
    assert folding.shown()[-1][2].endswith("(0 connection errors folded, 3 related lines at INFO)")


def test_what_is_not_recognised_keeps_its_level_even_during_an_outage() -> None:
    folding = Folding()
    folding.log(*LIBRDKAFKA_RETRY)
    unrecognised = [
        (
            "librdkafka",
            logging.ERROR,
            "ERROR [rdkafka#producer-1] [thrd:sasl_ssl://h:9093/1]: SASL authentication "
            "error: Authentication failed during authentication",
        ),
        (
            "librdkafka",
            logging.WARNING,
            "CONFWARN [rdkafka#producer-1] [thrd:app]: Configuration property x is a "
            "consumer property and will be ignored by this producer instance",
        ),
        ("olstream.connectors.sink.failures", logging.ERROR, "the receiver answered 401 Unauthorized"),
        (
            "aiokafka.consumer.group_coordinator",
            logging.ERROR,
            "OffsetCommit failed for group g due to group error (GroupAuthorizationFailedError), will rejoin",
        ),
    ]
    for line in unrecognised:
        folding.log(*line)
    assert folding.shown()[1:] == [
        (logging.getLevelName(level), name, message) for name, level, message in unrecognised
    ]


def test_why_the_process_ends_is_never_folded_even_when_it_names_a_broker_that_did_not_answer() -> None:
    """A source restarted while its broker was away gave up after its --wait (mixed-fault run, seed 29):
    its exit reason must stay an ERROR, not become "lost connection ... folded"."""
    folding = Folding()
    folding.log(*SOURCE_ERROR_CALLBACK)  # an outage is open
    exit_reason = (
        "olstream.cli.source",
        logging.ERROR,
        f"Kafka at {BROKER} did not answer within 15 s: KafkaError{{code=_TRANSPORT,val=-195,"
        'str="Failed to get metadata: Local: Broker transport failure"}',
    )
    crashed = (
        "olstream.streams.runtime.exits",
        logging.CRITICAL,
        'cannot send: KafkaError{code=_ALL_BROKERS_DOWN,val=-187,str="1/1 brokers are down"}',
    )
    for line in (exit_reason, crashed):
        folding.log(*line)
    assert folding.shown()[1:] == [
        (logging.getLevelName(level), n, m) for n, level, m in (exit_reason, crashed)
    ]
    assert sighting(*exit_reason) is None and sighting(*crashed) is None
    folding.log("olstream.cli.source", logging.WARNING, SOURCE_ERROR_CALLBACK[2])  # not an exit reason
    assert len(folding.shown()) == 3


def test_each_broker_is_an_outage_of_its_own() -> None:
    folding = Folding()
    other = (
        "librdkafka",
        logging.ERROR,
        f"FAIL [rdkafka#producer-1] [thrd:{OTHER}/2]: {OTHER}/2: Connect to ipv4#{OTHER} failed: "
        "Connection refused",
    )
    _outage(folding, [LIBRDKAFKA_RETRY, other], seconds=5)
    _outage(folding, [other], seconds=40)  # the first broker answers after 5 s, the other does not
    shown = folding.shown()
    assert [(level, message.split(": FAIL")[0]) for level, _name, message in shown] == [
        ("WARNING", f"lost connection to broker {BROKER}"),
        ("WARNING", f"lost connection to broker {OTHER}"),
        (
            "INFO",
            f"connection to broker {BROKER} back after 4 s "
            "(49 connection errors folded, 0 related lines at INFO)",
        ),
    ]
    assert [o.broker for o in folding.fold.open_outages()] == [OTHER]


def test_a_line_that_names_the_broker_without_failing_ends_its_outage_at_once() -> None:
    folding = Folding()
    _outage(folding, AIOKAFKA_RETRIES, seconds=8)
    answer = ("aiokafka.consumer.group_coordinator", logging.WARNING, "OffsetCommit to node 1 answered late")
    folding.log(*answer)
    assert folding.shown()[-2:] == [
        (
            "INFO",
            "aiokafka",
            f"connection to broker {BROKER} (node 1) back after 8 s "
            "(319 connection errors folded, 0 related lines at INFO)",
        ),
        ("WARNING", *answer[::2]),
    ]
    assert folding.fold.open_outages() == []


def test_an_outage_that_lasts_is_recalled_every_remind_seconds() -> None:
    folding = Folding(remind=60.0)
    _outage(folding, [LIBRDKAFKA_RETRY], seconds=130, per_second=1)
    loud = [message for level, _name, message in folding.shown(logging.WARNING)]
    assert len(loud) == 3
    assert loud[1:] == [
        f"still no connection to broker {BROKER} after 60 s (59 connection errors folded so far)",
        f"still no connection to broker {BROKER} after 120 s (119 connection errors folded so far)",
    ]


def test_a_burst_of_queued_lines_after_the_outage_ended_is_one_info_and_lost_again_is_a_warning() -> None:
    folding = Folding()
    _outage(folding, [LIBRDKAFKA_RETRY], seconds=15)
    folding.wait(40)
    folding.lines.clear()
    for _ in range(38):  # a stuck producer closed: what it queued while the broker was away
        folding.log(*LIBRDKAFKA_RETRY)
    folding.wait(40)
    assert folding.shown() == [
        (
            "INFO",
            "librdkafka",
            f"38 connection errors of broker {BROKER} came at once 41 s after it answered again: lines a "
            "client queued while it was away, folded",
        )
    ]
    folding.lines.clear()
    _outage(folding, [LIBRDKAFKA_RETRY], seconds=3)  # lost again: errors for seconds
    loud = folding.shown(logging.WARNING)
    assert len(loud) == 1 and loud[0][2].startswith(f"lost connection to broker {BROKER}: FAIL")
    folding.wait(40)
    assert folding.shown()[-1][2].startswith(f"connection to broker {BROKER} back after 2 s")


def test_faust_s_missing_sensor_state_is_info() -> None:
    folding = Folding()
    folding.log("faust.app.base", logging.WARNING, "[^-App]: Missing sensor state for rebalance #2")
    assert folding.shown() == [("INFO", "faust.app.base", "[^-App]: Missing sensor state for rebalance #2")]


@pytest.mark.parametrize(
    ("name", "level", "message", "kind"),
    [
        *((n, lv, m, Kind.LOST) for n, lv, m in AIOKAFKA_RETRIES),
        (*LIBRDKAFKA_RETRY, Kind.LOST),
        (*SOURCE_ERROR_CALLBACK, Kind.LOST),
        (*ALL_DOWN, Kind.LOST),
        ("olstream.shared.kafka_admin.librdkafka", logging.ERROR, LIBRDKAFKA_RETRY[2], Kind.LOST),
        (*COMMITTED_TIMED_OUT, Kind.EXPLAINED),
        (*SESSION_EXPIRED, Kind.EXPLAINED),
        (*TIMER_OVERLAP, Kind.EXPLAINED),
        (
            "olstream.streams.runtime.input_order",
            logging.WARNING,
            "could not read the end offsets of input "
            'partitions [0, 1]: KafkaError{code=_UNKNOWN_PARTITION,val=-190,str="Local: Unknown partition"}',
            Kind.EXPLAINED,
        ),
        (
            "librdkafka",
            logging.WARNING,
            "GETPID [rdkafka#producer-6] [thrd:main]: Failed to acquire idempotence PID "
            f"from broker {BROKER}/1: Broker: Coordinator load in progress: retrying",
            Kind.EXPLAINED,
        ),
        ("faust.app.base", logging.WARNING, "[^-App]: Warning: Task timed out!", Kind.EXPLAINED),
        (
            "olstream.connectors.source.publisher",
            logging.INFO,
            SOURCE_ERROR_CALLBACK[2],
            None,
        ),  # below WARNING
        (
            "olstream.connectors.sink.sink",
            logging.WARNING,
            "lost ['t[0]']; their in-flight events will be redelivered by the new owner",
            None,
        ),
    ],
)
def test_what_each_line_is(name: str, level: int, message: str, kind: Kind | None) -> None:
    seen = sighting(name, level, message)
    assert (seen.kind if seen else None) is kind


@pytest.fixture
def _root_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """setup_logging's handler for one test, its watcher asleep (the test ticks), no outage left."""
    monkeypatch.setattr(connection_logs, "TICK_SECONDS", 3600.0)
    monkeypatch.setattr(connection_logs, "QUIET_SECONDS", 0.0)
    root = logging.getLogger()
    saved = (
        list(root.handlers),
        root.level,
        {n: logging.getLogger(n).level for n in ("aiokafka", "librdkafka")},
    )
    try:
        yield
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        for name, level in saved[2].items():
            logging.getLogger(name).setLevel(level)


@pytest.mark.usefixtures("_root_logging")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_setup_logging_folds_the_retries_as_text_and_as_json(
    fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging(fmt)
    for _ in range(200):
        for name, level, message in [*AIOKAFKA_RETRIES, LIBRDKAFKA_RETRY]:
            logging.getLogger(name).log(level, message)
    (fold,) = [f for f in logging.getLogger().handlers[0].filters if isinstance(f, ConnectionLogFold)]
    assert not fold.tick()
    lines = capsys.readouterr().err.splitlines()
    if fmt == "json":
        docs = [json.loads(line) for line in lines]
        shown = [(d["level"], d["logger"], d["message"]) for d in docs]
    else:
        shown = [tuple(line.split(" ", 2)[2].split(" ", 1)) for line in lines]
        shown = [(level, *rest.split(": ", 1)) for level, rest in shown]
    assert [(level, name) for level, name, _message in shown] == [
        ("WARNING", "aiokafka"),
        ("WARNING", "librdkafka"),
        ("INFO", "aiokafka"),
        ("INFO", "librdkafka"),
    ]
    assert shown[0][2].startswith(
        f"lost connection to broker {BROKER} (node 1): Unable connect to node with id 1"
    )
    assert shown[2][2].startswith(
        f"connection to broker {BROKER} (node 1) back after 0 s (799 connection errors"
    )
    assert shown[3][2].startswith(f"connection to broker {BROKER} back after 0 s (199 connection errors")
