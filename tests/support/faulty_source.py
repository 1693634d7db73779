"""`python -m tests.support.faulty_source PARTITION:OFFSET[,...] source ...`: the real source, whose
row check refuses the rows at these event log positions (reason `injected_refusal`), as a version
that cannot read them would (an unknown writer schema, say); everything else is the product's code.
`olstream errors redrive --log` then re-reads them with the real check."""

from __future__ import annotations

import sys
from typing import Any

from olstream.cli.main import main
from olstream.connectors.source import rowcheck


def inject(positions: set[tuple[int, int]]) -> None:
    real = rowcheck.RowChecker.headers_for

    def refusing(self: rowcheck.RowChecker, row: Any) -> Any:
        if (row.partition, row.offset) in positions:
            return "injected_refusal"
        return real(self, row)

    rowcheck.RowChecker.headers_for = refusing  # type: ignore[method-assign]


if __name__ == "__main__":
    inject({(int(p), int(o)) for p, o in (item.split(":") for item in sys.argv[1].split(","))})
    sys.exit(main(sys.argv[2:]))
