"""Moved to cxlkit.train.spill.path_mapped; this path is kept for one release."""
import sys
import warnings

from .spill import path_mapped as _moved

warnings.warn("cxlkit.train.spill_mapped moved to cxlkit.train.spill.path_mapped; "
              "import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
