"""Moved to cxlkit.train.spill.split; this path is kept for one release."""
import sys
import warnings

from .spill import split as _moved

warnings.warn("cxlkit.train.spill_split moved to cxlkit.train.spill.split; "
              "import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
