"""Planning with measurements: the short profiling runs that most shrink a recommendation's uncertainty,
the published tuned recipes and the measured runs that support beating them."""
