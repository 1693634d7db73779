"""The Kafka clients' lines during a broker outage: one WARNING when a connection is lost, one INFO when
it is back, not a line per retry.

Without this, a 15 s broker restart made each worker log about 2,000 WARNING/ERROR lines (issue 50):
aiokafka's "Unable connect to node" and "Unable to update metadata" at every retry, librdkafka's
"FAIL ... Connect to ... failed" at ERROR (confluent-kafka maps librdkafka's LOG_ERR to ERROR on the
`librdkafka` logger, `olstream.shared.kafka_clients`), the source's error callback for each of them.

`ConnectionLogFold` is a filter on the handler of `olstream.shared.logs.setup_logging`, so it sees
every line of every logger. It sorts the lines it knows:

- **lost**: a connection failure (aiokafka's connection errors, librdkafka's `FAIL` lines, a
  `KafkaError` of code `_TRANSPORT` or `_ALL_BROKERS_DOWN` wherever logged). Keyed by the client
  library ("aiokafka" or "librdkafka") and the broker (its address, or aiokafka's node id). The
  first of a key becomes one WARNING, "lost connection to broker X: <the line>; further connection
  errors are folded until it answers"; the next are dropped and counted. A lost line below WARNING
  (librdkafka's "Disconnected" at INFO) never opens an outage; it is dropped while one is open.
- **explained**: what a lost connection causes and the clients retry on their own (aiokafka's
  coordinator marked dead, an expired heartbeat session, a `_TIMED_OUT` or `_UNKNOWN_PARTITION`
  KafkaError, mode's overlapping timers...). While an outage is open these are logged at INFO;
  otherwise as they are.
- **routine**: lines that need no person ever (faust's "Missing sensor state for rebalance"): INFO.

A line that says why the process ends (`ends_the_process`: the commands' ERROR lines, CRITICAL) is
never folded, whatever broker it names: a source that gives up on a broker that does not answer at
its start exits with that reason at ERROR, not with "further connection errors are folded".

An outage ends when a line of its client library names its broker without failing, or when no
lost line of its key came for `quiet_seconds` (librdkafka backs off up to 10 s between attempts,
and logs late: below): then one INFO, "connection to broker X back after N s (M connection errors
folded, K related lines at INFO)", N from the first lost line to the last (or to the line that
showed it back). An outage still open after `remind_seconds` is recalled by a WARNING, once per
`remind_seconds`. Everything else, librdkafka's own severity included, passes as it is.

librdkafka's lines are queued and logged when its client is next polled, so a client that was busy
in a call (a commit, a flush; a stuck producer closed once its call returned) logs the failures of
the outage late, all at once. Lost lines within `RELAPSE_SECONDS` after the broker's outage ended
therefore warn only if they still come `BURST_SECONDS` after the first of them (lost again); a
burst that stops sooner is one INFO, "N connection errors of broker X came at once S s after it
answered again: lines a client queued while it was away, folded".
"""

from __future__ import annotations

import enum
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

QUIET_SECONDS = 30.0  # no lost line of a key for this long: its connection is back
REMIND_SECONDS = 60.0  # an outage still open is recalled this often
TICK_SECONDS = 1.0  # how often the watcher thread looks for outages that ended
RELAPSE_SECONDS = 120.0  # lost lines this soon after an outage ended may be lines queued during it
BURST_SECONDS = 1.0  # ... unless they still come this long after the first of them
REASON_CHARS = 300  # the quoted first line of an outage, at most
SUMMARY = "olstream_connection_summary"  # the attribute that marks this module's own records

AIOKAFKA = "aiokafka"
LIBRDKAFKA = "librdkafka"


class Kind(enum.Enum):
    LOST = "lost"
    EXPLAINED = "explained"
    ROUTINE = "routine"


@dataclass(frozen=True)
class Sighting:
    """What a line says about a connection: its kind and the client library it is about."""

    kind: Kind
    library: str


# A broker's address in a line: `host:port`, `[v6]:port` (librdkafka's `ipv4#h:p`, `thrd:h:p/1`,
# aiokafka's `Connection at h:p`), or aiokafka's `('host', port)`.
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9_.-]*):(\d{1,5})(?![\d.])")
_HOST_PORT_TUPLE = re.compile(r"\('([^']+)', (\d{1,5})\)")
_NODE = re.compile(
    r"node with id (\d+)|node id (\d+)|to node (\d+)|\(node (\d+)\)"
    r"|(?:metadata|messages|offsets) from \[?(\d+)"
)

_AIOKAFKA_LOST = re.compile(
    r"Unable connect to|Unable to (?:update|request) metadata from|NodeNotReadyError|KafkaConnectionError"
    r"|Connect call failed|ConnectionRefusedError|Connection refused"
)
_AIOKAFKA_EXPLAINED = re.compile(
    r"Marking the coordinator dead|marking coordinator dead|Heartbeat session expired"
    r"|is either not started or not valid|member_id was not recognized|because it is rebalancing"
    r"|generation id is not +current|RequestTimedOutError|KafkaTimeoutError"
    r"|GroupCoordinatorNotAvailableError|NotCoordinatorForGroupError|CoordinatorLoadInProgressError"
)
# librdkafka's error callback and the KafkaErrors the services log, whatever their logger
_KAFKA_ERROR_LOST = re.compile(
    r"code=_TRANSPORT\b|code=_ALL_BROKERS_DOWN\b|Connect to ipv[46]#|brokers are down"
)
_KAFKA_ERROR_EXPLAINED = re.compile(
    r"code=(?:_TIMED_OUT|_MSG_TIMED_OUT|_UNKNOWN_PARTITION|_WAIT_COORD|UNKNOWN_TOPIC_OR_PART|LEADER_NOT_AVAILABLE"
    r"|NOT_LEADER\w*|NOT_COORDINATOR\w*|COORDINATOR_\w+|REQUEST_TIMED_OUT)\b"
    r"|Local: Timed out|Coordinator load in progress|Broker: Not coordinator"
)
_LIBRDKAFKA_EXPLAINED = re.compile(r"retrying|Timed out")  # a request librdkafka retries itself
_FAUST_EXPLAINED = re.compile(
    r"Timer .* is overlapping|Task timed out!|make sure it's hanging before restart"
    r"|Thread keepalive is not responding"
)
_FAUST_ROUTINE = re.compile(r"Missing sensor state for rebalance")


def _library(logger_name: str) -> str | None:
    """aiokafka's loggers (`aiokafka`, `aiokafka.consumer.fetcher`...), or one of librdkafka's lines
    (`librdkafka`, `kafka_clients.LIBRDKAFKA_LOG`, or a quieter one named `<module>.librdkafka`)."""
    if logger_name == AIOKAFKA or logger_name.startswith(AIOKAFKA + "."):
        return AIOKAFKA
    if logger_name == LIBRDKAFKA or logger_name.endswith("." + LIBRDKAFKA):
        return LIBRDKAFKA
    return None


def address_named(message: str) -> str | None:
    """The first broker address a line names, as `host:port`."""
    found = _HOST_PORT_TUPLE.search(message) or _HOST_PORT.search(message)
    return f"{found[1]}:{found[2]}" if found else None


def node_named(message: str) -> str | None:
    """The node id an aiokafka line names, as `node N`."""
    found = _NODE.search(message)
    return f"node {next(group for group in found.groups() if group)}" if found else None


EXIT_REASON_LOGGERS = ("olstream.cli.",)  # the commands log at ERROR only why they exit


def ends_the_process(logger_name: str, level: int) -> bool:
    """A line that says why the process ends (the commands' errors, a worker's CRITICAL): a person
    needs it as it is, even when it names a broker that did not answer."""
    return level >= logging.CRITICAL or (
        level >= logging.ERROR and logger_name.startswith(EXIT_REASON_LOGGERS)
    )


def sighting(logger_name: str, level: int, message: str) -> Sighting | None:
    """What one line says about a connection to a broker; None for a line this module leaves alone."""
    library = _library(logger_name)
    root = logger_name.partition(".")[0]
    if library == AIOKAFKA:
        if _AIOKAFKA_LOST.search(message):
            return Sighting(Kind.LOST, AIOKAFKA)
        if _AIOKAFKA_EXPLAINED.search(message):
            return Sighting(Kind.EXPLAINED, AIOKAFKA)
        return None
    if library == LIBRDKAFKA:
        if message.startswith("FAIL ") or _KAFKA_ERROR_LOST.search(message):
            return Sighting(Kind.LOST, LIBRDKAFKA)
        if _LIBRDKAFKA_EXPLAINED.search(message) or _KAFKA_ERROR_EXPLAINED.search(message):
            return Sighting(Kind.EXPLAINED, LIBRDKAFKA)
        return None
    if root in ("faust", "mode"):
        if _FAUST_ROUTINE.search(message):
            return Sighting(Kind.ROUTINE, root)
        if _FAUST_EXPLAINED.search(message):
            return Sighting(Kind.EXPLAINED, root)
        return None
    if level < logging.WARNING or ends_the_process(logger_name, level):
        return None
    if _KAFKA_ERROR_LOST.search(message):  # the source's error callback, a service's KafkaException
        return Sighting(Kind.LOST, LIBRDKAFKA)
    if _KAFKA_ERROR_EXPLAINED.search(message):
        return Sighting(Kind.EXPLAINED, LIBRDKAFKA)
    return None


@dataclass
class Outage:
    """One lost connection: since when, until when lines said so, how many lines were folded."""

    library: str
    broker: str | None  # its key: aiokafka's `node N` where named, else an address
    address: str | None
    first: float
    last: float
    reminded: float
    folded: int = 0
    explained: int = 0
    late: float | None = None  # opened this long after the broker's last outage ended: maybe queued lines

    @property
    def where(self) -> str:
        if self.broker is None:
            return "the Kafka cluster"
        if self.address and self.address != self.broker:
            return f"broker {self.address} ({self.broker})"
        return f"broker {self.broker}"


def _set_level(record: logging.LogRecord, level: int) -> None:
    record.levelno = level
    record.levelname = logging.getLevelName(level)


class ConnectionLogFold(logging.Filter):
    """A handler's filter that folds the lines of a lost broker connection (the module's docstring).

    `emit` logs this filter's own lines (the end of an outage, reminders): the handler's `handle`;
    they are logged when the root logger is enabled for their level (`enabled_for`). The seconds
    default to `QUIET_SECONDS` and `REMIND_SECONDS`; `clock` is monotonic seconds. `watch=False`
    leaves `tick` to the caller (the tests); with `watch`, a daemon thread calls it every
    `TICK_SECONDS` while an outage is open.
    """

    def __init__(
        self,
        emit: Callable[[logging.LogRecord], object],
        *,
        quiet_seconds: float | None = None,
        remind_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        enabled_for: Callable[[int], bool] | None = None,
        watch: bool = True,
    ) -> None:
        super().__init__()
        self._emit = emit
        self._quiet_seconds = QUIET_SECONDS if quiet_seconds is None else quiet_seconds
        self._remind_seconds = REMIND_SECONDS if remind_seconds is None else remind_seconds
        self._clock = clock
        self._enabled_for = enabled_for or logging.getLogger().isEnabledFor
        self._watch = watch
        self._watching = False
        self._lock = threading.Lock()
        self._outages: dict[tuple[str, str | None], Outage] = {}
        self._addresses: dict[str, str] = {}  # aiokafka's `node N` -> its address, once a line said both
        self._ended: dict[tuple[str, str | None], float] = {}  # when each key's last outage ended

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, SUMMARY, False):
            return True
        message = record.getMessage()
        seen = sighting(record.name, record.levelno, message)
        ended: list[logging.LogRecord] = []
        with self._lock:
            if seen is None:
                keep = True
                ended = self._answered(_library(record.name), message)
            elif seen.kind is Kind.ROUTINE:
                keep = True
                _set_level(record, min(record.levelno, logging.INFO))
            elif seen.kind is Kind.EXPLAINED:
                keep = self._explained(record, seen, message)
            else:
                keep = self._lost(record, seen, message)
            watch = self._watch and not self._watching and bool(self._outages)
            self._watching = self._watching or watch
        self._log(ended)
        if watch:
            threading.Thread(target=self._watch_outages, name="olstream-connection-logs", daemon=True).start()
        return keep

    def tick(self) -> bool:
        """Ends the outages quiet for `quiet_seconds` and recalls those open another `remind_seconds`,
        logging their lines. True while an outage is still open."""
        now = self._clock()
        out: list[logging.LogRecord] = []
        with self._lock:
            for outage in list(self._outages.values()):
                if now - outage.last >= self._quiet_seconds:
                    out.append(self._end(outage, outage.last))
                elif now - outage.reminded >= self._remind_seconds:
                    outage.reminded = now
                    out.append(
                        _record(
                            outage.library,
                            logging.WARNING,
                            "still no connection to %s after %.0f s (%d connection errors folded so far)",
                            (outage.where, now - outage.first, outage.folded),
                        )
                    )
            still_open = bool(self._outages)
            self._watching = self._watching and still_open
        self._log(out)
        return still_open

    def open_outages(self) -> list[Outage]:
        with self._lock:
            return list(self._outages.values())

    # -- under the lock -------------------------------------------------------------------------
    def _lost(self, record: logging.LogRecord, seen: Sighting, message: str) -> bool:
        now = self._clock()
        broker, address = self._broker(seen.library, message)
        outage = self._open_outage(seen.library, broker, address)
        if outage is not None:
            outage.last = now
            if outage.late is None or now - outage.first < BURST_SECONDS:
                outage.folded += 1
                return False
            outage.late = None  # errors still coming a second later: lost again, not lines queued
        elif record.levelno < logging.WARNING:
            return True  # librdkafka's "Disconnected" at INFO: a routine close unless an outage is open
        else:
            ended = self._ended_at(seen.library, broker)
            late = now - ended if ended is not None and now - ended < RELAPSE_SECONDS else None
            outage = Outage(seen.library, broker, address, first=now, last=now, reminded=now, late=late)
            self._outages[(seen.library, broker)] = outage
            if late is not None:  # a burst a client queued during the outage, or lost again: wait and see
                outage.folded += 1
                return False
        record.msg = "lost connection to %s: %s; further connection errors are folded until it answers"
        record.args = (outage.where, _shortened(message))
        _set_level(record, logging.WARNING)
        return True

    def _explained(self, record: logging.LogRecord, seen: Sighting, message: str) -> bool:
        broker, address = self._broker(seen.library, message)
        outage = self._open_outage(seen.library, broker, address) or next(iter(self._outages.values()), None)
        if outage is not None and record.levelno > logging.INFO:
            outage.explained += 1
            _set_level(record, logging.INFO)
        return True

    def _answered(self, library: str | None, message: str) -> list[logging.LogRecord]:
        """A line of a client library that names the broker of an open outage without failing: it
        answers again."""
        if library is None or not self._outages:
            return []
        broker, _address = self._broker(library, message)
        if broker is None:
            return []
        outage = self._outages.get((library, broker))
        return [self._end(outage, self._clock())] if outage is not None else []

    def _broker(self, library: str, message: str) -> tuple[str | None, str | None]:
        """(the key of the broker a line names, its address where known): aiokafka's `node N` learns
        its address from a line that names both."""
        address = address_named(message)
        node = node_named(message) if library == AIOKAFKA else None
        if node is None:
            return address, address
        if address is not None:
            self._addresses[node] = address
        return node, self._addresses.get(node)

    def _open_outage(self, library: str, broker: str | None, address: str | None) -> Outage | None:
        """The open outage of this library a line belongs to: the broker's own (by key or address);
        for a line naming no broker, or while an outage naming none is open, any of the library's."""
        own = self._outages.get((library, broker))
        if own is not None:
            return own
        for (other_library, other_broker), outage in self._outages.items():
            if other_library != library:
                continue
            if broker is None or other_broker is None or (address and address == outage.address):
                return outage
        return None

    def _ended_at(self, library: str, broker: str | None) -> float | None:
        """When the library's last outage of this broker ended (or of any, naming none)."""
        return max(
            (
                at
                for (other_library, other_broker), at in self._ended.items()
                if other_library == library and (other_broker == broker or None in (other_broker, broker))
            ),
            default=None,
        )

    def _end(self, outage: Outage, answered: float) -> logging.LogRecord:
        del self._outages[(outage.library, outage.broker)]
        self._ended[(outage.library, outage.broker)] = answered
        if outage.late is not None:
            return _record(
                outage.library,
                logging.INFO,
                "%d connection errors of %s came at once %.0f s after it answered again: lines a client "
                "queued while it was away, folded",
                (outage.folded, outage.where, outage.late),
            )
        return _record(
            outage.library,
            logging.INFO,
            "connection to %s back after %.0f s (%d connection errors folded, %d related lines at INFO)",
            (outage.where, max(0.0, answered - outage.first), outage.folded, outage.explained),
        )

    # -- outside the lock -----------------------------------------------------------------------
    def _log(self, records: list[logging.LogRecord]) -> None:
        for record in records:
            if self._enabled_for(record.levelno):
                self._emit(record)

    def _watch_outages(self) -> None:
        while True:
            time.sleep(TICK_SECONDS)
            if not self.tick():
                return


def _record(name: str, level: int, msg: str, args: tuple[object, ...]) -> logging.LogRecord:
    """One of this module's own lines, on the logger of the client library it speaks of."""
    record = logging.LogRecord(name, level, __file__, 0, msg, args, None)
    setattr(record, SUMMARY, True)
    return record


def _shortened(message: str) -> str:
    return message if len(message) <= REASON_CHARS else message[: REASON_CHARS - 3] + "..."
