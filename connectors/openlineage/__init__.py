"""The OpenLineage sink and its transports."""
