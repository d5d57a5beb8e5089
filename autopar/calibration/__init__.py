"""autopar.calibration."""
