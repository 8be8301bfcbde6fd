"""attnc's C core: the extension built for this CPU's best SIMD path (or
ATTNC_CPU's: attnc._dispatch chooses), whose functions are re-exported here so
that every module takes them from this small module (``from .. import
_core``), not through the package's __init__. Their signatures are in
_core.pyi, generated at build time with the wrappers from the operation
table (csrc/python/ops/)."""

from ._dispatch import load_core

_extension = load_core()
globals().update({name: getattr(_extension, name) for name in dir(_extension) if not name.startswith("_")})
