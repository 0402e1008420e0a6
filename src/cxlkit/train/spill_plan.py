"""Moved to cxlkit.train.spill.planner; this path is kept for one release."""
import sys
import warnings

from .spill import planner as _moved

warnings.warn("cxlkit.train.spill_plan moved to cxlkit.train.spill.planner; "
              "import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
