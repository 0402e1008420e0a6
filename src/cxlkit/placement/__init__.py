"""Placement: memory policies, memory allocated and moved under them, where its pages are, the
kernel's weighted-interleave weights; the preload's stripes and registry, the kernel's tiering,
and the audit of a process's pages (import those submodules by name)."""
from ..errors import WeightedInterleaveUnsupportedError, WeightMismatchError, deprecated_name
from .buffer import (Buffer, PlacementAudit, Residency, alloc, audit_placement, place,
                     residency)
from .policy import (DEFAULT_STRIPE_CHUNK, MiB, Policy, bind, default, interleave, parse,
                     parse_nodes, parse_weights, preferred, set_task_policy, stripe, task_policy,
                     validate, weighted)
from .weights import (KERNEL_MAX_WEIGHT, restore_kernel_auto_weights, weights_from,
                      write_kernel_weights)

__all__ = [
    "Buffer", "PlacementAudit", "Residency", "alloc", "audit_placement", "place", "residency",
    "DEFAULT_STRIPE_CHUNK", "MiB", "Policy", "bind", "default", "interleave", "parse",
    "parse_nodes", "parse_weights", "preferred", "set_task_policy", "stripe", "task_policy",
    "validate", "weighted", "KERNEL_MAX_WEIGHT", "restore_kernel_auto_weights", "weights_from",
    "write_kernel_weights", "WeightedInterleaveUnsupportedError", "WeightMismatchError",
]


def __getattr__(name: str) -> type:
    return deprecated_name(__name__, name)
