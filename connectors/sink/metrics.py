"""The sink's Prometheus metrics (docs/sink.md#metrics); `lag.py` holds its lag gauge."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

DELIVERED = Counter("olstream_sink_delivered", "Events the receiver accepted (2xx), written or printed")
RETRIED = Counter("olstream_sink_retried", "Failed send attempts that will be retried")
DEAD_LETTERED = Counter(
    "olstream_sink_dead_lettered",
    "Events written to the DLQ: rejected (400/413/422), or failing alone for --retry-timeout",
)
BACKOFF_SECONDS = Gauge("olstream_sink_backoff_seconds", "Length of the backoff wait in progress")
IN_FLIGHT = Gauge("olstream_sink_in_flight", "Requests in flight to the receiver")
REPEATED = Counter("olstream_sink_repeated", "Latest terminal events of a job posted again (job_versions)")
CIRCUIT_OPEN = Gauge(
    "olstream_sink_circuit_open",
    "1 while the receiver's circuit is open: failures counted against the receiver as a whole (an "
    "outage, 429) and no delivery since; every sender waits for its backoff. 0 once a delivery succeeds",
)
