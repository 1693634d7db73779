"""What an input record is: faust's event and its place in the input topic and in the event log.

The worker's chain (``olstream.streams.runtime.chain``) hands it from step to step unchanged; what
the steps find about it travels beside it (`Taken`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from olstream.streams.log_marks import position_headers


@dataclass(frozen=True, slots=True)
class InputRecord:
    """What an input record is: faust's event, its place in the input topic and in the event log."""

    event: Any  # faust's event: its message (partition, offset, headers) and value
    partition: int  # input partition
    offset: int  # input offset
    log_partition: int | None  # its position in the event log, from its headers (None: none there)
    log_offset: int | None
    redriven: bool  # an error record sent again (`olstream errors redrive`), with its log position

    @classmethod
    def of(cls, event: Any) -> InputRecord:
        msg = event.message
        log_partition, log_offset, redriven = position_headers(msg.headers)
        placed = log_partition is not None and log_offset is not None
        return cls(event, msg.partition, msg.offset, log_partition, log_offset, redriven and placed)

    def where(self) -> str:
        """The record's place, for an error that ends the process."""
        return (
            f"processing the record at topic partition {self.partition}, offset {self.offset} "
            f"(log partition {self.log_partition}, offset {self.log_offset})"
        )
