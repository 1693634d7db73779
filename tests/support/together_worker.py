"""`python -m tests.support.together_worker DIR N worker ...`: the real worker, whose start waits until
N such workers read the changelog's partition count, so that they all found it too small and all
grow it.

A supervisor that restarts replicas together still starts them some hundred milliseconds apart
(interpreter start, imports), and a replica that starts late finds the changelog grown already. This
takes the jitter out: the first read of the changelog's partition count (`topology.match_changelog`)
is returned only once N processes read theirs (each writes a mark into DIR); the input topic's count,
read before it, is not held. Waiting before the read
was not enough on a busy machine: one replica read and grew the changelog before the others read it.
Everything else is the product's own code.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from olstream.cli.main import main
from olstream.shared.kafka_clients import Kafka
from olstream.streams.runtime import topology

TIMEOUT = 120.0  # s for all N to arrive: generous, for processes that start slowly on a busy machine


def wait_for_all(directory: Path, count: int) -> None:
    """Mark this process's arrival in `directory` and return once `count` processes arrived."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / str(os.getpid())).touch()
    deadline = time.monotonic() + TIMEOUT
    while len(list(directory.iterdir())) < count:
        if time.monotonic() > deadline:
            raise SystemExit(
                f"together_worker: fewer than {count} workers in {directory} after {TIMEOUT:g} s"
            )
        time.sleep(0.005)


def inject(directory: Path, count: int) -> None:
    read = topology.topic_partitions
    waited: list[bool] = []

    def read_together(kafka: Kafka, name: str, timeout: float = 10.0) -> int | None:
        partitions = read(kafka, name, timeout)
        # the topics' set-up reads the input's count first, in the same module: only the changelog's
        if not waited and name.endswith(f"-{topology.TABLE_NAME}-changelog"):
            waited.append(True)
            wait_for_all(directory, count)
        return partitions

    topology.topic_partitions = read_together


if __name__ == "__main__":
    inject(Path(sys.argv[1]), int(sys.argv[2]))
    sys.exit(main(sys.argv[3:]))
