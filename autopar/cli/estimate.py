"""CLI commands: estimate (filled in by its owner)."""
