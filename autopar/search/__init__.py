"""autopar.search."""
