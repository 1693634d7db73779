"""The lineage stream: joins run records into OpenLineage RunEvents."""
