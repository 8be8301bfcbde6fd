"""Small assertions shared by the test files (fixtures live in conftest.py)."""

import numpy as np


def same_bits(a, b, what=""):
    """a and b have the same shape, dtype and bytes."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, what
    assert a.tobytes() == b.tobytes(), f"{what}: not bitwise identical"


def close(actual, expected, rel, what=""):
    """|actual - expected| <= rel * max(1, max|expected|) elementwise, same shape,
    and actual finite."""
    actual = np.asarray(actual)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert np.isfinite(actual).all(), f"{what}: non-finite values"
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=0, atol=rel * scale, err_msg=what)
