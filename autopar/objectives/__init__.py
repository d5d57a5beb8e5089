"""autopar.objectives."""
