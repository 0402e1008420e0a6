"""cxlkit.kv: the KV-cache pool (block keys, layout descriptors, the store over the shared pool)."""
from .hashing import block_hashes, none_hash

__all__ = ["block_hashes", "none_hash"]
