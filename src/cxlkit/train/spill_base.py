"""Moved to cxlkit.train.spill.path_base; this path is kept for one release."""
import sys
import warnings

from .spill import path_base as _moved

warnings.warn("cxlkit.train.spill_base moved to cxlkit.train.spill.path_base; "
              "import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
