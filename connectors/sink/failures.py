"""What the sink says about an event it could not deliver, and what a dead letter carries."""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import KafkaError, Message, Producer

from olstream.connectors.sink.delivery import DeliveryResult, Outcome, PendingEvent
from olstream.connectors.sink.metrics import BACKOFF_SECONDS, DEAD_LETTERED
from olstream.shared import deadletter
from olstream.shared.logs import redact
from olstream.shared.metrics import set_health

log = logging.getLogger(__name__)

Headers = list[tuple[str, str | bytes | None]]


def log_failure(destination: str, event: PendingEvent, result: DeliveryResult, wait: float) -> None:
    """A failed send that is retried in `wait` s: a warning, or an error and the health for an answer
    that points at the sink's configuration (it is retried, never dead-lettered)."""
    what = f"HTTP {result.status}" if result.status is not None else result.detail
    if result.outcome is Outcome.MISCONFIGURED or result.outcome is Outcome.REJECTED:
        log.error(
            "CONFIGURATION PROBLEM: %s answered %s for %s (%s): check the URL, endpoint and API key; "
            "nothing is dead-lettered, retrying in %.1f s",
            destination,
            what,
            event.where(),
            result.detail[:200],
            wait,
        )
        set_health(False, redact(f"receiver answered {what}: configuration problem"))
    else:
        log.warning(
            "cannot deliver %s to %s: %s; retrying in %.1f s%s",
            event.where(),
            destination,
            what,
            wait,
            " (Retry-After)" if result.retry_after is not None else "",
        )
    BACKOFF_SECONDS.set(wait)


def dead_letter_headers(event: PendingEvent, result: DeliveryResult, reason: str) -> Headers:
    return [
        (deadletter.ERROR, reason),
        (deadletter.HTTP_STATUS, str(result.status if result.status is not None else "")),
        # the answer as given, but never a credential it echoes (the URL, its user info, the key)
        (deadletter.HTTP_RESPONSE, redact(result.detail).encode("utf-8")[: deadletter.RESPONSE_LIMIT]),
        *deadletter.origin_headers(event.topic, event.partition, event.offset),
        *event.redrive,  # a re-driven event that failed again keeps its attempt count
    ]


def log_dead_lettered(event: PendingEvent, result: DeliveryResult, reason: str, topic: str) -> None:
    log.warning(
        "%s %s with HTTP %s (%s); dead-lettered to %s",
        "receiver rejected" if reason == deadletter.REJECTED else "gave up on",
        event.where(),
        result.status,
        result.detail[:300],
        topic,
    )


def dead_letter(
    dlq: Producer,
    topic: str,
    event: PendingEvent,
    result: DeliveryResult,
    reason: str,
    finished: Callable[[PendingEvent], None],
    again: Callable[[PendingEvent], None],
) -> None:
    """Produce a given-up event to the dead-letter topic, with why in its headers; once the broker
    acknowledged it the event is `finished` (its offset may be committed), else handed back (`again`)."""

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            log.error("cannot dead-letter %s (%s); will try again", event.where(), err)
            again(event)
            return
        DEAD_LETTERED.inc()
        log_dead_lettered(event, result, reason, topic)
        finished(event)

    dlq.produce(
        topic,
        event.value,
        event.key,
        headers=dead_letter_headers(event, result, reason),
        on_delivery=delivered,
    )
    dlq.poll(0)
