"""`python -m tests.support.faulty_worker RUN_ID worker ...`: the real worker, with one fault injected.

The pure step (`apply`) raises RuntimeError on every record of the engine run RUN_ID; everything
else is the product's own code, so a test sees what the worker does with an unexpected exception.
"""

from __future__ import annotations

import sys
from typing import Any

from olstream.cli.main import main
from olstream.contract.records import Record
from olstream.streams.runtime import record_step


def inject(run_id: str) -> None:
    real = record_step.apply

    def failing(record: Record, *args: Any) -> Any:
        if record.engine_run_id == run_id:
            raise RuntimeError(f"injected fault on run {run_id}")
        return real(record, *args)

    record_step.apply = failing  # type: ignore[assignment]


if __name__ == "__main__":
    inject(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
