"""Moved to cxlkit.train.spill.path_copy; this path is kept for one release."""
import sys
import warnings

from .spill import path_copy as _moved

warnings.warn("cxlkit.train.spill_copy moved to cxlkit.train.spill.path_copy; "
              "import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
