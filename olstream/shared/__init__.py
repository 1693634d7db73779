"""Shared pieces beside the contract: errors, exit codes, logging, metrics, configuration, Kafka clients."""
