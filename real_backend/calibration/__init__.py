"""Calibration: the real engine's step costs over a designed grid (`workbench calibrate`)."""
