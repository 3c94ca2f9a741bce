"""Shims that make the simulator and dataset packages run under gymnasium 1.x, NumPy 2 and Python 3.11."""
