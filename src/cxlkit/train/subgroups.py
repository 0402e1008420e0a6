"""Moved to cxlkit.train.spill.store; this path is kept for one release."""
import sys
import warnings

from .spill import store as _moved

warnings.warn("cxlkit.train.subgroups moved to cxlkit.train.spill.store; "
              "import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
