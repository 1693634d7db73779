"""Kafka connectors: the event-log source and the OpenLineage sink."""
