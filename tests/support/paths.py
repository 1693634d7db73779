"""Where the repository and its folders are, for tests that read files or start subprocesses."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STREAM_SCHEMAS = REPO / "streams" / "schemas"


def shared_marquez_jar() -> str | None:
    """The runnable Marquez server jar in `shared/marquez/` of a parent folder of the checkout, if any
    (Marquez is not on the Maven Central these machines reach: docs/limits.md)."""
    for parent in REPO.parents:
        jars = sorted((parent / "shared" / "marquez").glob("marquez-api-*.jar"))
        if jars:
            return str(jars[-1])
    return None
