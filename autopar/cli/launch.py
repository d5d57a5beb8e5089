"""CLI commands: launch (filled in by its owner)."""
