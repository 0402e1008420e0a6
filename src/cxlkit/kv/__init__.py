"""cxlkit.kv: the KV-cache pool — block keys (vLLM chain hashes), layout descriptors, and the
block store over the shared pool."""
from .hashing import block_hashes, none_hash
from .layout import BlockLayout, EngineTensors
from .store import KVStats, Store, host_stats

__all__ = ["BlockLayout", "EngineTensors", "KVStats", "Store", "block_hashes", "host_stats",
           "none_hash"]
