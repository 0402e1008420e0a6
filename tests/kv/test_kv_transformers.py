"""transformers connector: a prompt's prefix stored as pool blocks and reused by a later request
(in this process and in another one) gives the same greedy tokens and fp32 logits as a full
recompute, and runs only the suffix."""
import multiprocessing as mp

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="needs transformers (make deps)")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from cxlkit.integrations.transformers import PrefixCache, generate, layout_for  # noqa: E402


def tiny_llama(seed=0, dtype=torch.float32):
    cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).to(dtype).eval()


PREFIX = [(7 * i + 3) % 512 for i in range(40)]


def test_layout_follows_the_model_config():
    lay = layout_for(tiny_llama().config, torch.float32)
    assert (lay.num_layers, lay.num_kv_heads, lay.head_dim, lay.dtype) == (2, 2, 16, "float32")


def test_prefix_hit_gives_the_tokens_and_logits_of_full_recompute(pool_path):
    model = tiny_llama()
    pc = PrefixCache(pool_path, model, create=True, size=16 << 20, host_id=0, checksum=True)
    first, info1 = generate(model, PREFIX + [1, 2, 3, 4, 5], pc, max_new_tokens=6)
    assert info1.prefix_tokens == 0 and info1.stored_blocks == 2
    prompt = PREFIX + [9, 8, 7]
    hit, info = generate(model, prompt, pc, max_new_tokens=6)
    recompute, ref = generate(model, prompt, None, max_new_tokens=6, split_at=32)
    assert info.prefix_tokens == 32  # two 16-token blocks from the pool, 11 tokens run
    assert hit == recompute
    assert torch.equal(info.first_logits, ref.first_logits)  # fp32: bit for bit
    # one forward over the whole prompt sums in another order: same tokens, logits ~1e-6 apart
    oneshot, ref1 = generate(model, prompt, None, max_new_tokens=6)
    assert hit == oneshot
    torch.testing.assert_close(info.first_logits, ref1.first_logits, rtol=1e-5, atol=1e-5)


def test_a_whole_prompt_of_full_blocks_still_runs_its_last_block(pool_path):
    model = tiny_llama()
    pc = PrefixCache(pool_path, model, create=True, size=16 << 20, host_id=0)
    prompt = PREFIX[:32]
    generate(model, prompt, pc, max_new_tokens=2)
    toks, info = generate(model, prompt, pc, max_new_tokens=2)
    assert info.prefix_tokens == 16  # at least one token must be computed for logits
    assert toks == generate(model, prompt, None, max_new_tokens=2)[0]


def test_bfloat16_prefix_round_trips_bit_exact(pool_path):
    model = tiny_llama(dtype=torch.bfloat16)
    pc = PrefixCache(pool_path, model, create=True, size=16 << 20, host_id=0)
    generate(model, PREFIX + [1], pc, max_new_tokens=1)
    cache, n = pc.load(PREFIX + [2])
    assert n == 32
    from transformers import DynamicCache

    from cxlkit.integrations.transformers import _forward

    with torch.no_grad():
        _, ref = _forward(model, torch.tensor([PREFIX[:32]]), DynamicCache())
    for a, b in zip(cache.layers, ref.layers):
        assert torch.equal(a.keys.view(torch.int16), b.keys.view(torch.int16))
        assert torch.equal(a.values.view(torch.int16), b.values.view(torch.int16))


def _store_prefix(path, q):
    model = tiny_llama()
    pc = PrefixCache(path, model, host_id=1)
    q.put(generate(model, PREFIX + [1, 2], pc, max_new_tokens=1)[1].stored_blocks)


def test_prefix_stored_by_another_process_and_host_is_hit(pool_path):
    model = tiny_llama()
    pc = PrefixCache(pool_path, model, create=True, size=16 << 20, host_id=0)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_store_prefix, args=(pool_path, q))
    p.start()
    assert q.get(timeout=120) == 2
    p.join(60)
    toks, info = generate(model, PREFIX + [5, 6], pc, max_new_tokens=4)
    assert info.prefix_tokens == 32
    full, ref = generate(model, PREFIX + [5, 6], None, max_new_tokens=4, split_at=32)
    assert toks == full and torch.equal(info.first_logits, ref.first_logits)


def test_a_different_model_config_does_not_hit(pool_path):
    model = tiny_llama()
    pc = PrefixCache(pool_path, model, create=True, size=16 << 20, host_id=0)
    generate(model, PREFIX + [1], pc, max_new_tokens=1)
    other = LlamaForCausalLM(LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=96,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2)).eval()
    assert PrefixCache(pool_path, other, host_id=0).load(PREFIX + [1]) == (None, 0)


def test_generate_passes_the_cache_by_the_name_the_model_takes_without_deprecation_warnings(
        pool_path):
    # transformers 5.24 renamed forward's past_key_values to cache (the old name warns, and
    # goes in 5.40): a fresh clone's make test printed the FutureWarning six times
    import warnings

    from cxlkit.integrations import transformers as T

    model = tiny_llama()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        pc = PrefixCache(pool_path, model, create=True, size=16 << 20, host_id=0)
        tokens, _ = generate(model, PREFIX + [1, 2, 3], pc, max_new_tokens=4)
        again, info = generate(model, PREFIX + [1, 2, 3], pc, max_new_tokens=4)
        assert info.prefix_tokens == 32 and again == tokens
    assert len(tokens) == 4

    class NewName:  # forward as transformers >= 5.24 declares it
        def forward(self, input_ids=None, cache=None, use_cache=None):
            raise AssertionError

    class OldName:
        def forward(self, input_ids=None, past_key_values=None, use_cache=None):
            raise AssertionError

    assert T._cache_arg(NewName()) == "cache"
    assert T._cache_arg(OldName()) == "past_key_values"
    assert T._cache_arg(model) in ("cache", "past_key_values")
