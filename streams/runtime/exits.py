"""How the worker leaves when it must not go on: before anything past the last checkpoint is committed.

faust would restart a crashed agent and go on past the record, so the worker ends the process
itself (``os._exit``: no shutdown that could commit) and a restart processes the records again.
"""

from __future__ import annotations

import logging
import os
from typing import NoReturn

from olstream.shared.errors import DeliveryError, ExitCode
from olstream.streams.runtime.transaction_errors import Fenced

log = logging.getLogger(__name__)

EX_FAILED = ExitCode.FAILED  # an unexpected exception: leave at once, before anything past it is committed


def exit_on_failed_delivery(e: DeliveryError) -> NoReturn:
    """A batch could not be made durable: nothing of it was stored or committed, and its records are
    processed again (by this worker after a restart, or by the partition's next owner: `FENCED`)."""
    if isinstance(e, Fenced):
        log.critical("%s; exiting without storing the batch (its next owner processes it)", e)
        os._exit(ExitCode.FENCED)
    log.critical("%s; exiting without storing or committing the batch (it is processed again)", e)
    os._exit(ExitCode.SEND_FAILED)


def exit_on_unexpected(what: str, error: BaseException) -> NoReturn:
    """Stop the process now: faust would restart a crashed agent and go on past the record.

    Exceptions the project raises on purpose for bad input are routed to the errors topic before
    they get here; a failed send (`DeliveryError`) leaves as `exit_on_failed_delivery` says; anything
    else is a bug or a broken dependency, and the only safe answer is to leave before the record's
    offset (or its batch's) can be committed: it is processed again.
    """
    if isinstance(error, DeliveryError):
        exit_on_failed_delivery(error)
    log.critical(
        "%s: unexpected %s: %s; exiting without committing the batch (nothing past the last checkpoint "
        "is committed; the records are processed again)",
        what,
        type(error).__name__,
        error,
        exc_info=error,
    )
    os._exit(EX_FAILED)
