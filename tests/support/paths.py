"""Where the repository and its folders are, for tests that read files or start subprocesses."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STREAM_SCHEMAS = REPO / "streams" / "schemas"
