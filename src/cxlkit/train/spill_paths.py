"""Moved to cxlkit.train.spill.paths; this path is kept for one release."""
import sys
import warnings

from .spill import paths as _moved

warnings.warn("cxlkit.train.spill_paths moved to cxlkit.train.spill.paths; "
              "import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
