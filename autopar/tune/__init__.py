"""`autopar tune`: Bayesian optimisation of the layout on the user's own cluster, the analytical model (with its
calibration) as the prior, one short measured run at a time, until it is sure (autopar/tune/loop.py)."""
