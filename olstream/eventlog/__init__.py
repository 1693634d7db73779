"""The event log service: store interface, SQLite and PostgreSQL stores, writer API, simulator."""
