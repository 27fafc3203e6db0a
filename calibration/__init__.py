"""Calibration: GPU microbenchmarks, fits and checks that produce or validate step-cost profiles.

`sim` never imports this package; calibration imports `sim` for the profile schema.
"""
