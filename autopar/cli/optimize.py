"""CLI commands: optimize (filled in by its owner)."""
