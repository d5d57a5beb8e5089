"""The calibration models: features, the corrector and its scikit-learn-free predictor, the hierarchical
adapter, the unprofiled-stack prior, and the JSON model file. Every fitted model shares one base
(models/base.py: predict, predict_interval, to_params, from_params)."""
