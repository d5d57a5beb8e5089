"""CLI commands: whatif (filled in by its owner)."""
