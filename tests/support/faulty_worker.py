"""`python -m tests.support.faulty_worker [--refuse] RUN_ID worker ...`: the real worker, with one
fault injected.

The pure step (`apply`) raises RuntimeError on every record of the engine run RUN_ID; everything
else is the product's own code, so a test sees what the worker does with an unexpected exception.
With `--refuse` it refuses them as bad input instead (`StreamInputError`, reason `mapping_bug`):
a version with a mapping bug, whose records a fixed version is given again (`errors redrive`).
A re-driven record (`olstream.redrive.attempt`) is taken as the fixed version would.
"""

from __future__ import annotations

import sys
from typing import Any

from olstream.cli.main import main
from olstream.contract.records import Record
from olstream.streams.runtime import apply_record
from olstream.streams.state import StreamInputError


def inject(run_id: str, refuse: bool = False) -> None:
    real = apply_record.apply

    def failing(record: Record, *args: Any, **kwargs: Any) -> Any:
        if record.engine_run_id == run_id:
            if refuse:
                raise StreamInputError(
                    "mapping_bug", f"injected refusal of run {run_id}", record.partition, record.offset
                )
            raise RuntimeError(f"injected fault on run {run_id}")
        return real(record, *args, **kwargs)

    apply_record.apply = failing  # type: ignore[assignment]


if __name__ == "__main__":
    argv = sys.argv[1:]
    refusing = argv[0] == "--refuse"
    if refusing:
        argv = argv[1:]
    inject(argv[0], refusing)
    sys.exit(main(argv[1:]))
