# Run: .venv/bin/python examples/kv_prefix.py
"""Two processes share a prompt prefix through the KV pool: the first prefills and stores its
16-token blocks, the second (another host id) loads them and runs only the suffix."""
import multiprocessing as mp
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from cxlkit.integrations.transformers import PrefixCache, generate

POOL = f"/dev/shm/cxlkit-example-kv-{os.getpid()}"  # the child gets it as an argument
PREFIX = [(17 * i + 3) % 1000 for i in range(256)]  # e.g. a long system prompt


def model():
    torch.manual_seed(0)  # the same (random) weights in both processes
    cfg = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    return LlamaForCausalLM(cfg).eval()


def first(pool, q):
    m = model()
    pc = PrefixCache(pool, m, host_id=1)
    tokens, info = generate(m, PREFIX + [1, 2, 3], pc, max_new_tokens=4)
    q.put((info.stored_blocks, tokens))


if __name__ == "__main__":
    m = model()
    pc = PrefixCache(POOL, m, create=True, size=64 << 20, host_id=0)
    try:
        q = mp.get_context("spawn").Queue()
        p = mp.get_context("spawn").Process(target=first, args=(POOL, q))
        p.start()
        stored, _ = q.get(timeout=300)
        p.join()
        tokens, info = generate(m, PREFIX + [7, 8], pc, max_new_tokens=4)
        full, ref = generate(m, PREFIX + [7, 8], None, max_new_tokens=4)
        ran = len(PREFIX) + 2 - info.prefix_tokens
        print(f"stored {stored} blocks in process {p.pid}; this process took "
              f"{info.prefix_tokens} tokens from the pool and ran {ran}")
        print(f"TTFT {info.ttft_s * 1e3:.1f} ms (recompute {ref.ttft_s * 1e3:.1f} ms); "
              f"tokens {tokens} == recompute {full}: {tokens == full}")
        assert info.prefix_tokens == 256 and tokens == full
    finally:
        os.unlink(POOL)
