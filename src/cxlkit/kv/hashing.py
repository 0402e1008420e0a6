"""Block keys: chain hashes over full token blocks, defined exactly as vLLM's prefix-cache hashes
(vllm/v1/core/kv_cache_utils.py hash_block_tokens), so a key computed here equals the engine's.

    key(block i) = H((key(block i-1) or NONE_HASH, tuple(token ids of block i), extra_keys_i))
    NONE_HASH    = H(seed)            # vLLM: H(os.environ["PYTHONHASHSEED"])

H is "sha256" (pickle at the highest protocol, then SHA-256; vLLM's default) or "sha256_cbor"
(canonical CBOR, then SHA-256). The seed is a parameter, never read from the environment, so keys
do not depend on this process's PYTHONHASHSEED; engines that share a cache must run with
PYTHONHASHSEED equal to it.
"""
from __future__ import annotations

import hashlib
import math
import pickle
import struct
from collections.abc import Callable, Sequence
from typing import Any

HASH_ALGOS = ("sha256", "sha256_cbor")
DEFAULT_SEED = "0"


def sha256_pickle(obj: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def sha256_cbor(obj: Any) -> bytes:
    return hashlib.sha256(cbor_canonical(obj)).digest()


def _head(major: int, n: int) -> bytes:
    # RFC 8949 3.1: the argument in the shortest of 0/1/2/4/8 following bytes (preferred encoding)
    if n < 24:
        return bytes([major << 5 | n])
    if n < 0x100:
        return bytes([major << 5 | 24, n])
    if n < 0x10000:
        return bytes([major << 5 | 25]) + n.to_bytes(2, "big")
    if n < 0x100000000:
        return bytes([major << 5 | 26]) + n.to_bytes(4, "big")
    return bytes([major << 5 | 27]) + n.to_bytes(8, "big")


def _float(x: float) -> bytes:
    # shortest of half/single/double that keeps the value (cbor2 canonical=True does the same)
    if math.isnan(x):
        return b"\xf9\x7e\x00"
    for fmt, lead in (("e", 0xF9), ("f", 0xFA)):
        try:
            packed = struct.pack(">" + fmt, x)
        except OverflowError:
            continue
        if struct.unpack(">" + fmt, packed)[0] == x:
            return bytes([lead]) + packed
    return b"\xfb" + struct.pack(">d", x)


def cbor_canonical(obj: Any) -> bytes:
    """Canonical CBOR (RFC 8949 4.2 / RFC 7049 3.9 ordering) of None, bool, int, float, bytes,
    str, tuple/list and dict: the encoding vLLM's sha256_cbor hashes (cbor2.dumps canonical)."""
    if obj is None:
        return b"\xf6"
    if obj is True:
        return b"\xf5"
    if obj is False:
        return b"\xf4"
    if isinstance(obj, int):
        if obj >= 0:
            if obj < 1 << 64:
                return _head(0, obj)
            raw = obj.to_bytes((obj.bit_length() + 7) // 8, "big")
            return b"\xc2" + _head(2, len(raw)) + raw  # tag 2: unsigned bignum
        m = -1 - obj
        if m < 1 << 64:
            return _head(1, m)
        raw = m.to_bytes((m.bit_length() + 7) // 8, "big")
        return b"\xc3" + _head(2, len(raw)) + raw  # tag 3: negative bignum
    if isinstance(obj, float):
        return _float(obj)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        raw = bytes(obj)
        return _head(2, len(raw)) + raw
    if isinstance(obj, str):
        raw = obj.encode("utf-8")
        return _head(3, len(raw)) + raw
    if isinstance(obj, (tuple, list)):
        return _head(4, len(obj)) + b"".join(cbor_canonical(x) for x in obj)
    if isinstance(obj, dict):
        items = sorted((cbor_canonical(k), cbor_canonical(v)) for k, v in obj.items())
        # canonical key order: shorter encodings first, then bytewise
        items.sort(key=lambda kv: (len(kv[0]), kv[0]))
        return _head(5, len(items)) + b"".join(k + v for k, v in items)
    raise TypeError(f"extra_keys: cannot hash a {type(obj).__name__} with sha256_cbor")


def hash_fn(hash_algo: str) -> Callable[[Any], bytes]:
    if hash_algo == "sha256":
        return sha256_pickle
    if hash_algo == "sha256_cbor":
        return sha256_cbor
    raise ValueError(f"hash_algo: {hash_algo!r} is not one of {HASH_ALGOS}")


def none_hash(hash_algo: str = "sha256", seed: str = DEFAULT_SEED) -> bytes:
    """The parent of the first block: vLLM's NONE_HASH for PYTHONHASHSEED=seed."""
    if not isinstance(seed, str):
        raise TypeError(f"seed: expected str (a PYTHONHASHSEED value), got {type(seed).__name__}")
    return hash_fn(hash_algo)(seed)


def _token_tuple(block: Sequence[Any]) -> tuple[int, ...]:
    out = []
    for t in block:
        # numpy/torch integers pickle differently from int: hash what the engine hashes
        if isinstance(t, bool) or not hasattr(t, "__index__"):
            raise TypeError(f"token_ids: expected integers, got {type(t).__name__}")
        out.append(int(t.__index__()))
    return tuple(out)


def block_hashes(token_ids: Sequence[int], block_size: int = 16, extra_keys: Any = None,
                 parent: bytes | None = None, *, hash_algo: str = "sha256",
                 seed: str = DEFAULT_SEED) -> list[bytes]:
    """Keys of the full blocks of token_ids (a trailing partial block has none).

    extra_keys: None; a tuple used for every block (e.g. a LoRA name); or a list with one entry
    (tuple or None) per full block, as vLLM's generate_block_hash_extra_keys produces.
    parent: key of the block before token_ids[0], or None at the start of a sequence."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"block_size: expected a positive int, got {block_size!r}")
    if hasattr(token_ids, "tolist"):
        token_ids = token_ids.tolist()  # numpy / torch
    nfull = len(token_ids) // block_size
    if isinstance(extra_keys, list):
        if len(extra_keys) != nfull:
            raise ValueError(f"extra_keys: {len(extra_keys)} entries for {nfull} full blocks")
        per_block = extra_keys
    elif extra_keys is None or isinstance(extra_keys, tuple):
        per_block = [extra_keys] * nfull
    else:
        raise TypeError("extra_keys: expected None, a tuple, or a list of one tuple/None per block")
    if parent is not None and not isinstance(parent, (bytes, bytearray)):
        raise TypeError(f"parent: expected bytes, got {type(parent).__name__}")
    h = hash_fn(hash_algo)
    prev = bytes(parent) if parent else none_hash(hash_algo, seed)  # vLLM: `if not parent`
    keys = []
    for i in range(nfull):
        extra = per_block[i]
        if extra is not None and not isinstance(extra, tuple):
            raise TypeError(f"extra_keys[{i}]: expected a tuple or None")
        prev = h((prev, _token_tuple(token_ids[i * block_size:(i + 1) * block_size]), extra))
        keys.append(prev)
    return keys
