"""autopar.perf."""
