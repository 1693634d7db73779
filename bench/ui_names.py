"""What job names look like under Marquez's UI cuts, from a file of RunEvents (`olstream demo --out`).

Marquez's web UI (0.51.1) shows a job name cut at 40 characters in lists and headers and at 16 on
graph nodes and in the parent field (a cut name ends in "..."). For each job namespace this prints
how many names each cut leaves ambiguous (two jobs that read the same), for the names in the file
(hierarchical, the default) and for the flat names of the same runs (`--job-names flat`:
`{prefix}{workflowType}@{workflowVersion}`, from each event's `workflow` facet), and how many names
hold a dotted version (`@1.4.0`), whose dots read like path separators.

    .venv/bin/python bench/ui_names.py lineage.jsonl [--prefix PREFIX]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

CUTS = (40, 16)


def cut(name: str, width: int) -> str:
    """The name as the UI shows it in `width` characters."""
    return name if len(name) <= width else name[:width] + "..."


def _version_dots(path: str, mode: str) -> int:
    """Dots inside versions: a hierarchical path of k segments (one `@` each) has k - 1 separators."""
    separators = path.count("@") - 1 if mode == "hierarchical" else 0
    return path.count(".") - separators


def ambiguous(names: set[str], width: int) -> int:
    """Names whose cut reads the same as another name's cut."""
    shown = Counter(cut(n, width) for n in names)
    return sum(1 for n in names if shown[cut(n, width)] > 1)


@dataclass(frozen=True)
class Row:
    namespace: str
    mode: str
    jobs: int
    median_length: float
    longest: int
    over: dict[int, int]  # width -> names longer than it
    alike: dict[int, int]  # width -> names that read like another
    simple_alike_16: int  # the last segment (Marquez's simple name) cut at 16
    dotted_versions: int


def rows(path: Path, prefix: str) -> list[Row]:
    hierarchical: dict[str, set[str]] = defaultdict(set)
    flat: dict[str, set[str]] = defaultdict(set)
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        event = json.loads(line)
        ns, name = event["job"]["namespace"], event["job"]["name"]
        workflow = event["run"]["facets"]["workflow"]
        hierarchical[ns].add(name)
        flat[ns].add(f"{prefix}{workflow['workflowType']}@{workflow['workflowVersion']}")
    out = []
    for mode, by_ns in (("hierarchical", hierarchical), ("flat", flat)):
        for ns, names in sorted(by_ns.items()):
            lengths = [len(n) for n in names]
            simple = {n.rsplit(".", 1)[-1] if mode == "hierarchical" else n for n in names}
            out.append(
                Row(
                    ns,
                    mode,
                    len(names),
                    statistics.median(lengths),
                    max(lengths),
                    {w: sum(1 for n in names if len(n) > w) for w in CUTS},
                    {w: ambiguous(names, w) for w in CUTS},
                    ambiguous(simple, 16),
                    sum(1 for n in names if _version_dots(n[len(prefix) :], mode) > 0),
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("events", type=Path, help="newline-delimited RunEvents (olstream demo --out)")
    parser.add_argument(
        "--prefix", default="", help="the job prefix the worker ran with (--job-prefix) [none]"
    )
    args = parser.parse_args()
    print(
        "| job namespace | names | jobs | median / longest | > 40 | alike at 40 | > 16 | alike at 16 "
        "| simple names alike at 16 | dotted versions |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows(args.events, args.prefix):
        print(
            f"| {r.namespace} | {r.mode} | {r.jobs} | {r.median_length:g} / {r.longest} | {r.over[40]} "
            f"| {r.alike[40]} | {r.over[16]} | {r.alike[16]} | {r.simple_alike_16} | {r.dotted_versions} |"
        )


if __name__ == "__main__":
    main()
