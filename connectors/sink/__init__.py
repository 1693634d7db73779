"""The sink connector: delivers RunEvents from Kafka to an OpenLineage receiver, a file or stdout."""
