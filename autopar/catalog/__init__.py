"""autopar.catalog."""
