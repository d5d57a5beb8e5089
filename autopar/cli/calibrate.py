"""CLI commands: calibrate (filled in by its owner)."""
