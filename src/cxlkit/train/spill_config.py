"""Moved to cxlkit.train.spill.offload_config; this path is kept for one release."""
import sys
import warnings

from .spill import offload_config as _moved

warnings.warn("cxlkit.train.spill_config moved to cxlkit.train.spill.offload_config; "
              "import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
