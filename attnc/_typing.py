"""Type aliases for the public API's annotations (the package ships py.typed).

Arguments that take arrays accept anything NumPy converts (``ArrayLike``):
lists, NumPy arrays, any object with the buffer protocol. Results are NumPy
arrays (``Array``). ``DTypeLike`` is what ``np.dtype`` accepts: ``np.float32``,
``"float64"``, ...
"""

from __future__ import annotations

from typing import Union

import numpy as np
import numpy.typing as npt

Array = np.ndarray
ArrayLike = npt.ArrayLike
DTypeLike = npt.DTypeLike
Seed = Union[int, None]

__all__ = ["Array", "ArrayLike", "DTypeLike", "Seed"]
