"""Memory tiers of this machine: the records (model), the sysfs reader and discover(), the
node classifier, and the facts a caller reads directly (memory nodes, free bytes, weights)."""
from .classify import HBM_MAX_LATENCY_RATIO, HBM_MIN_BANDWIDTH_RATIO, SLOW_MIN_LATENCY_RATIO
from .facts import (CXL_DEVICES_DIR, DAX_DEVICES_DIR, MEMORY_TIERING_DIR, MEMTIER_CHUNK_BITS,
                    NODE_DIR, WEIGHTED_INTERLEAVE_AUTO_FILES, WEIGHTED_INTERLEAVE_DIR,
                    format_cpulist, memory_nodes, node_available_bytes, parse_cpulist,
                    weighted_interleave_auto, weighted_interleave_weights)
from .model import (KINDS, AccessClass, CXLMemdev, CXLRegion, DaxDevice, HugePages, MemoryTier,
                    Node, Topology)
from .sysfs import discover

__all__ = [
    "AccessClass", "CXLMemdev", "CXLRegion", "DaxDevice", "HugePages", "KINDS", "MemoryTier",
    "Node", "Topology", "discover", "format_cpulist", "memory_nodes", "node_available_bytes",
    "parse_cpulist", "weighted_interleave_auto", "weighted_interleave_weights",
    "CXL_DEVICES_DIR", "DAX_DEVICES_DIR", "MEMORY_TIERING_DIR", "MEMTIER_CHUNK_BITS", "NODE_DIR",
    "WEIGHTED_INTERLEAVE_AUTO_FILES", "WEIGHTED_INTERLEAVE_DIR", "HBM_MAX_LATENCY_RATIO",
    "HBM_MIN_BANDWIDTH_RATIO", "SLOW_MIN_LATENCY_RATIO",
]
