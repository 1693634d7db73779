"""olstream: a workflow engine's event log, turned into OpenLineage lineage through Kafka."""

from __future__ import annotations

__version__ = "0.1.0"
