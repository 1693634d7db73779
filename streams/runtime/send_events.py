"""Step 6: send the record's RunEvents to the output topic (or its partition's transaction).

The pure step rendered them (``olstream.streams.mapping``); here each goes out with its headers
(contract.md, events topic) without waiting: the checkpoint step makes the sends durable.
"""

from __future__ import annotations

from olstream.streams.runtime.chain import Step, Taken
from olstream.streams.runtime.metrics import event_counter
from olstream.streams.runtime.sender import EventSends, Headers


class SendEvents:
    """Sends a record's RunEvents: to the shared sender, or under exactly_once into the transaction
    of the record's input partition (`PartitionTransactions`, which the gate selected)."""

    def __init__(self, output_topic: str, sender: EventSends, next_step: Step) -> None:
        self.output_topic = output_topic
        self.sender = sender
        self.next = next_step

    async def submit(self, item: Taken) -> None:
        if not item.done:
            for out in item.outputs:
                headers: Headers = list(out.headers())
                self.sender.send(self.output_topic, out.key, out.value, headers)
                event_counter(out.event_type).inc()
        await self.next.submit(item)
