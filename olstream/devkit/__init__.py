"""Local infrastructure: a real Kafka broker, PostgreSQL and Marquez started by the project."""
