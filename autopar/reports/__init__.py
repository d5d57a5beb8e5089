"""autopar.reports."""
