"""Independent NumPy float64 reference implementations for the attnc test suite.

Nothing in this package imports attnc.
"""
