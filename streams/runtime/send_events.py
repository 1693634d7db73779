"""Step 6: send the record's RunEvents to the output topic (under exactly_once, in the worker's transaction).

The pure step rendered them (``olstream.streams.mapping``); here each goes out with its headers
(contract.md, events topic) without waiting: the checkpoint step makes the sends durable.
"""

from __future__ import annotations

from olstream.streams.runtime.chain import Link, Step, Taken
from olstream.streams.runtime.metrics import event_counter
from olstream.streams.runtime.sender import EventSends, Headers
from olstream.streams.runtime.transaction_errors import Fenced


class SendEvents(Link):
    """Sends a record's RunEvents through what it was built with: the shared sender, or under
    exactly_once the worker's transactional producer (`WorkerTransactions`), whose open transaction
    the checkpoint commits. A send that finds the transaction fenced returns the fence."""

    def __init__(self, output_topic: str, sender: EventSends, next_step: Step[Taken]) -> None:
        self.output_topic = output_topic
        self.sender = sender
        self.next = next_step

    async def submit(self, item: Taken) -> Fenced | None:
        if not item.done:
            try:
                for out in item.outputs:
                    headers: Headers = list(out.headers())
                    self.sender.send(self.output_topic, out.key, out.value, headers)
                    event_counter(out.event_type).inc()
            except Fenced as e:  # the worker's transaction can never commit: the gate drops the batch
                return e
        return await self.next.submit(item)
