"""Small assertions shared by the test files (fixtures live in conftest.py)."""

import numpy as np


def same_bits(a, b, what=""):
    """a and b have the same shape, dtype and bytes."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, what
    assert a.tobytes() == b.tobytes(), f"{what}: not bitwise identical"
