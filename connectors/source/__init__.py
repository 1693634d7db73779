"""The source connector: tails the event log and publishes each record to Kafka."""
