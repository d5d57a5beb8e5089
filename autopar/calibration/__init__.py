"""autopar.calibration: measured runs correct the analytical model.

Subpackages by subject, lowest first (a subpackage imports only those before it):
records/ (the run record and its specs), store/ (the run store), ingest/ (tables and training logs in),
planning/ (profiling plans, recipes and their measured support), models/ (features, correctors, adapter,
stack prior, model file), evaluation/ (validation, novelty, pairs, fit summary, memory verdicts,
assumptions), apply/ (the Calibration object: fit, default model, applied to estimates and batches).
`python -m autopar.calibration.build_default` regenerates the shipped default model.
"""
