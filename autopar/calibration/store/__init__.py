"""The run store: run records deduplicated by fingerprint, in SQLite (the default) or PostgreSQL."""
