"""Bench: the event-log codec (generated Avro code) against fastavro's schemaless calls.

    .venv/bin/python bench/codec.py [--runs 20000]

Encodes and decodes every record of a seeded simulated workload (in memory) and prints
records per CPU second for both. The bytes are identical (tests/unit/test_codec.py).
The stream needs >= 5,000 records/s and the source decodes every row.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Callable
from pathlib import Path

import fastavro

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from olstream.contract import codec  # noqa: E402
from olstream.contract.records import Record  # noqa: E402
from olstream.eventlog.simulate import simulate  # noqa: E402
from tests.support.memory_store import MemoryEventLogStore  # noqa: E402


def rate(work: Callable[[], int], repeat: int = 3) -> float:
    """Best records per CPU second of `work` (which returns how many records it handled)."""
    best = 0.0
    for _ in range(repeat):
        cpu = time.process_time()
        n = work()
        best = max(best, n / max(time.process_time() - cpu, 1e-9))
    return best


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20_000)
    args = parser.parse_args()
    store = MemoryEventLogStore(8)
    simulate(store, args.runs, seed=1)
    rows = store.all_rows()
    records: list[Record] = [codec.decode(r.payload, r.partition, r.offset) for r in rows]
    schemas = codec.known_writer_schemas()

    def fastavro_decode() -> int:
        for row in rows:
            ws = schemas[row.payload[2:10]]
            buf = io.BytesIO(row.payload)
            buf.seek(10)
            codec.from_avro_dict(ws.record_name, fastavro.schemaless_reader(buf, ws.parsed, None))
        return len(rows)

    def fastavro_encode() -> int:
        current = codec.current_schemas()
        for record in records:
            ws = current[type(record).__name__]
            buf = io.BytesIO()
            buf.write(codec.MAGIC + ws.fingerprint)
            fastavro.schemaless_writer(buf, ws.parsed, codec.to_avro_dict(record))
        return len(records)

    def olstream_decode() -> int:
        for row in rows:
            codec.decode(row.payload, row.partition, row.offset)
        return len(rows)

    def olstream_encode() -> int:
        for record in records:
            codec.encode(record)
        return len(records)

    print(f"{len(rows)} records of a simulated workload ({args.runs} runs)")
    print(f"{'operation':<10} {'olstream codec':>16} {'fastavro calls':>16}   (records per CPU second)")
    print(f"{'decode':<10} {rate(olstream_decode):>16,.0f} {rate(fastavro_decode):>16,.0f}")
    print(f"{'encode':<10} {rate(olstream_encode):>16,.0f} {rate(fastavro_encode):>16,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
