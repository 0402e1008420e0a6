"""Moved to cxlkit.train.spill.layout; this path is kept for one release."""
import sys
import warnings

from .spill import layout as _moved

warnings.warn("cxlkit.train.subgroup_layout moved to cxlkit.train.spill.layout; "
              "import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
