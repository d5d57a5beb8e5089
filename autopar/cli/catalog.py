"""CLI commands: catalog (filled in by its owner)."""
