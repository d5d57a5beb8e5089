"""autopar.costs."""
