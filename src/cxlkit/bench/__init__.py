"""Measuring the tiers: memory latency / bandwidth / loaded latency per node, host copy paths,
and weighted-interleave weights computed from the measurements. Plots live in bench.plot
(matplotlib, imported only there)."""
from .copy import copy_settings
from .copy import run as run_copy
from .memory import settings
from .memory import run as run_memory
from .weights import load_result, node_bandwidths, weights_from, weights_table

__all__ = ["copy_settings", "load_result", "node_bandwidths", "run_copy", "run_memory",
           "settings", "weights_from", "weights_table"]
