"""cxlkit: CXL and tiered memory for AI and HPC on Linux."""
from . import _native
from .policy import (Buffer, Policy, PlacementAudit, Residency, WeightedInterleaveUnsupported,
                     WeightMismatchError, alloc, bind, default, interleave, place, preferred,
                     residency, stripe, weighted)

__version__ = _native.version()

__all__ = [
    "Buffer", "Policy", "PlacementAudit", "Residency", "WeightedInterleaveUnsupported",
    "WeightMismatchError", "alloc", "bind", "default", "interleave", "place", "preferred",
    "residency", "stripe", "weighted", "__version__",
]
