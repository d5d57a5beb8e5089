"""Run records: the schema of a measured training run, its cells, validation and fingerprint, and the
specs (model, cluster, workload, strategy) and analytical estimates it describes."""
