"""`autopar dryrun`: a few real training steps of a strategy's slice on one host, against the prediction.

plan.py (which slice, no torch) and record.py (prediction, comparison, run record, no torch) are plain
autopar; comm.py, layers.py, model.py, train.py, check.py and launch.py import torch, which is an optional
extra (`pip install 'autopar[dryrun]'`): nothing outside this package imports them, and the CLI loads them
only when the command runs (errors.require_torch first).
"""
